defmodule ExBashkit.Session.SnapshotTest do
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.{Result, Session}
  alias ExBashkit.Test.{MapFs, PeerNode}

  # Builds every kind of state a snapshot carries. Ends with `false` so that
  # $? is not 0 when the snapshot is taken.
  @setup ~S"""
  export EXPORTED="exported value"
  plain="p v"
  declare -i counter=41
  mkdir -p /work/sub/deeper /work/emptydir && cd /work/sub
  printf 'text\n' > /work/a.txt
  printf 'bin\000\377\001' > /work/bin.dat
  chmod 600 /work/a.txt
  ln -s /work/a.txt /work/link
  arr=(a "b c" d)
  declare -A map=([k1]=v1 [k2]="v 2")
  greet() { echo "hi $1 from ${FUNCNAME[0]}"; }
  alias ll='echo from-alias'
  pushd /tmp >/dev/null
  pushd /work/sub >/dev/null
  false
  """

  # Prints the state a script can observe, in a stable form. Kept free of
  # side effects on the state it prints (it only reads).
  @dump ~S"""
  echo "plain=$plain counter=$counter"
  env | grep '^EXPORTED='
  declare -p plain EXPORTED counter arr map 2>&1
  pwd
  dirs
  alias
  declare -f
  ll
  greet there
  for f in $(find /work /tmp /home -print | sort); do
    if [ -L "$f" ]; then echo "$f -> $(readlink "$f")"
    elif [ -d "$f" ]; then echo "$f/"
    else echo "$f $(stat -c %a "$f") $(od -An -tx1 "$f" | tr -d ' \n')"; fi
  done
  """

  defp dump(session), do: run!(session, @dump).stdout

  defp snapshot!(session, opts \\ []) do
    assert {:ok, bytes} = Session.snapshot(session, opts)
    assert is_binary(bytes)
    bytes
  end

  defp restore!(session, bytes, opts \\ []) do
    assert {:ok, %Session{} = restored} = Session.restore(session, bytes, opts)
    restored
  end

  defp populated do
    s = Session.new()
    assert run!(s, @setup).exit_code == 1
    s
  end

  describe "round trip" do
    test "every kind of shell state and the filesystem reach a fresh session" do
      source = populated()
      bytes = snapshot!(source)
      target = restore!(Session.new(), bytes)

      # The interpreter's own view first (before any exec changes it).
      # `fs_usage` counts what bashkit allocated, which a restore need not repeat.
      assert Map.delete(Session.state!(target), :fs_usage) ==
               Map.delete(Session.state!(source), :fs_usage)

      assert %{last_exit_code: 1, functions: ["greet"]} = Session.state!(target)

      expected = dump(source)
      assert dump(target) == expected

      # The dump really covers each kind of state (not two empty strings).
      for fragment <- [
            "plain=p v counter=41",
            "EXPORTED=exported value",
            ~S(declare -x EXPORTED="exported value"),
            ~S|declare -a arr=([0]="a" [1]="b c" [2]="d")|,
            ~S|declare -A map=([k1]="v1" [k2]="v 2" )|,
            "/work/sub\n/work/sub /tmp /work/sub\n",
            "alias ll='echo from-alias'",
            "from-alias\nhi there from greet\n",
            "/work/a.txt 600 746578740a\n",
            "/work/bin.dat 644 62696e00ff01\n",
            "/work/link -> /work/a.txt\n",
            "/work/emptydir/\n",
            "/work/sub/deeper/\n"
          ] do
        assert expected =~ fragment
      end

      assert Session.read_file(target, "/work/bin.dat") == {:ok, <<"bin", 0, 255, 1>>}
      assert {:ok, %{type: :symlink}} = Session.stat(target, "/work/link")
    end

    test "variables keep their attributes: exported ones reach child shells, integers stay integers" do
      target = restore!(Session.new(), snapshot!(populated()))
      assert run!(target, "bash -c 'echo child:$EXPORTED'").stdout == "child:exported value\n"
      assert run!(target, "bash -c 'echo child:[$plain]'").stdout == "child:[]\n"
      assert run!(target, "counter+=1; echo $counter").stdout == "42\n"
    end

    test "restoring replaces the target's own state rather than merging into it" do
      target = Session.new()

      run!(
        target,
        "mine=1; export MINE=1; mine_fn() { :; }; alias mine_alias=true; echo x > /mine.txt"
      )

      target = restore!(target, snapshot!(populated()))

      assert run!(
               target,
               "echo [$mine][$MINE]; type mine_fn mine_alias 2>&1 | grep -c 'not found'"
             ).stdout ==
               "[][]\n2\n"

      assert {:error, _} = Session.read_file(target, "/mine.txt")
    end

    test "restoring a session's own earlier snapshot undoes what came after" do
      s = populated()
      bytes = snapshot!(s)
      before = dump(s)

      run!(s, "plain=changed; unset -f greet; rm -r /work; cd /; arr+=(e)")
      refute dump(s) == before

      s = restore!(s, bytes)
      assert dump(s) == before
    end

    test "the restored session's options are its own: username, hostname" do
      source = Session.new(username: "alice", hostname: "src-host")
      run!(source, "x=1")
      target = restore!(Session.new(username: "bob", hostname: "dst-host"), snapshot!(source))
      # Shell variables come from the snapshot (USER was a variable of the
      # source); the hostname is configuration and stays the target's.
      assert run!(target, "echo $x $USER; hostname").stdout == "1 alice\ndst-host\n"
    end

    test "a snapshot is a plain binary: it survives term_to_binary, files and copies" do
      bytes = snapshot!(populated())
      path = Path.join(System.tmp_dir!(), "ex_bashkit_snap_#{System.unique_integer([:positive])}")
      File.write!(path, :erlang.term_to_binary(%{snap: bytes}))
      on_exit(fn -> File.rm(path) end)

      %{snap: loaded} = path |> File.read!() |> :erlang.binary_to_term()
      # A sub-binary of a larger binary works too.
      <<_::binary-size(3), sub::binary>> = "xyz" <> loaded

      for candidate <- [loaded, sub] do
        target = restore!(Session.new(), candidate)
        assert run!(target, "echo $plain").stdout == "p v\n"
      end
    end

    test "large files round-trip" do
      big = :crypto.strong_rand_bytes(3 * 1024 * 1024)
      source = Session.new(files: %{"/big.bin" => big})
      target = restore!(Session.new(), snapshot!(source))
      assert Session.read_file(target, "/big.bin") == {:ok, big}
    end

    test "one snapshot restores into many sessions, which then diverge" do
      bytes = snapshot!(populated())

      [a, b] = for _ <- 1..2, do: restore!(Session.new(), bytes)
      run!(a, "plain=A; echo a > /work/a.txt")
      assert run!(b, "echo $plain; cat /work/a.txt").stdout == "p v\ntext\n"
      assert run!(a, "echo $plain; cat /work/a.txt").stdout == "A\na\n"
    end
  end

  describe "what bashkit does not carry across execs" do
    # bashkit clears traps and $? at the start of every exec (its threat
    # model: nothing transient leaks from one script into the next). They
    # are captured in the snapshot (see the Rust unit test in session/snapshot.rs),
    # but a script can never observe them after a restore, exactly as it
    # cannot observe them in the next exec of the same session.
    test "traps and $? are per exec, with or without a restore" do
      s = Session.new()
      run!(s, "trap 'echo int' INT; (exit 7)")
      assert run!(s, "echo \"[$?]\"; trap -p").stdout == "[0]\n"

      run!(s, "trap 'echo int' INT; (exit 7)")
      target = restore!(Session.new(), snapshot!(s))
      assert run!(target, "echo \"[$?]\"; trap -p").stdout == "[0]\n"
    end

    test "a trap that fires at the end of an exec is not replayed by a restore" do
      s = Session.new()
      assert run!(s, "trap 'echo bye' EXIT; x=1").stdout == "bye\n"
      target = restore!(Session.new(), snapshot!(s))
      assert run!(target, "echo $x").stdout == "1\n"
    end
  end

  describe "options" do
    test ":exclude_filesystem carries shell state only and leaves the target's files alone" do
      source = populated()
      bytes = snapshot!(source, exclude_filesystem: true)
      assert byte_size(bytes) < byte_size(snapshot!(source))

      target = Session.new(files: %{"/target.txt" => "kept", "/work/sub/.keep" => ""})
      target = restore!(target, bytes)

      assert run!(target, "echo $plain; greet x; pwd").stdout ==
               "p v\nhi x from greet\n/work/sub\n"

      assert Session.read_file(target, "/target.txt") == {:ok, "kept"}
      assert {:error, _} = Session.read_file(target, "/work/a.txt")
    end

    test ":exclude_functions leaves functions out; the target ends with none" do
      source = populated()
      bytes = snapshot!(source, exclude_functions: true)

      target = Session.new()
      run!(target, "own() { :; }")
      target = restore!(target, bytes)

      assert run!(target, "declare -f | wc -l; echo $plain; cat /work/a.txt").stdout ==
               "0\np v\ntext\n"

      assert run!(target, "greet").exit_code == 127
    end

    test "both exclusions together still carry variables, cwd and aliases" do
      bytes = snapshot!(populated(), exclude_filesystem: true, exclude_functions: true)
      target = restore!(Session.new(cwd: "/work/sub"), bytes)

      assert run!(target, "echo ${arr[1]} ${map[k2]}; ll; pwd").stdout ==
               "b c v 2\nfrom-alias\n/work/sub\n"
    end

    test ":key seals the snapshot; the same key restores it" do
      source = populated()
      key = :crypto.strong_rand_bytes(32)
      keyed = snapshot!(source, key: key)
      target = restore!(Session.new(), keyed, key: key)
      assert dump(target) == dump(source)

      # Keys are any non-empty binary, not only 32 random bytes.
      keyed = snapshot!(source, key: "k")
      assert run!(restore!(Session.new(), keyed, key: "k"), "echo $plain").stdout == "p v\n"
    end

    test "invalid options are programmer errors" do
      s = Session.new()

      for {opts, message} <- [
            {[key: ""], ~r/:key must be a non-empty binary/},
            {[key: :secret], ~r/:key must be a non-empty binary/},
            {[key: ~c"charlist"], ~r/:key must be a non-empty binary/},
            {[exclude_filesystem: :yes], ~r/:exclude_filesystem must be a boolean/},
            {[exclude_functions: nil], ~r/:exclude_functions must be a boolean/},
            {[bogus: true], ~r/unknown snapshot\/2 option/},
            {[:key], ~r/must be a keyword list/},
            {%{key: "k"}, ~r/must be a keyword list/}
          ] do
        assert_raise ArgumentError, message, fn -> Session.snapshot(s, opts) end
      end

      {:ok, bytes} = Session.snapshot(s)

      for {opts, message} <- [
            {[key: ""], ~r/:key must be a non-empty binary/},
            {[key: 1], ~r/:key must be a non-empty binary/},
            {[exclude_filesystem: true], ~r/unknown restore\/3 option/},
            {"key", ~r/must be a keyword list/}
          ] do
        assert_raise ArgumentError, message, fn -> Session.restore(s, bytes, opts) end
      end
    end

    test "non-binary snapshots are refused with a message; non-sessions raise ArgumentError" do
      s = Session.new()
      {:ok, bytes} = Session.snapshot(s)

      for bad <- [nil, :snapshot, 42, [bytes], String.to_charlist("abc"), {bytes}, %{}] do
        assert_raise ArgumentError, ~r/snapshot must be a binary/, fn ->
          Session.restore(s, bad)
        end
      end

      assert {:ok, _} = Session.restore(s, bytes)

      assert_raise ArgumentError, ~r/must be a session/, fn ->
        Session.restore(:not_a_session, bytes)
      end

      assert_raise ArgumentError, ~r/must be a session/, fn ->
        Session.snapshot(:not_a_session)
      end

      assert_raise ArgumentError, ~r/must be a session/, fn -> Session.snapshot(make_ref()) end
    end
  end

  describe "rejected input leaves the session exactly as it was" do
    setup do
      target = populated()
      run!(target, "plain=target-only; echo target > /work/target.txt")
      %{target: target, before: dump(target), key: "sekrit key"}
    end

    # Restores `bytes` expecting an error, and checks nothing changed.
    defp rejected!(target, before, bytes, opts \\ []) do
      state = Session.state!(target)
      assert {:error, message} = Session.restore(target, bytes, opts)
      assert Session.state!(target) == state
      assert is_binary(message) and message != ""
      assert dump(target) == before
      message
    end

    test "empty, tiny and random binaries", %{target: t, before: before, key: key} do
      assert rejected!(t, before, "") =~ "snapshot too short"
      assert rejected!(t, before, "", key: key) =~ "snapshot too short"
      assert rejected!(t, before, <<0>>) =~ "invalid snapshot"

      for size <- [1, 31, 32, 33, 100, 2_048, 65_536], _ <- 1..3 do
        junk = :crypto.strong_rand_bytes(size)
        rejected!(t, before, junk)
        rejected!(t, before, junk, key: key)
      end
    end

    test "truncated at every offset", %{target: t, before: before, key: key} do
      plain = snapshot!(populated())
      keyed = snapshot!(populated(), key: key)

      for {bytes, opts} <- [{plain, []}, {keyed, [key: key]}],
          len <- 0..(byte_size(bytes) - 1) do
        assert {:error, _} = Session.restore(t, binary_part(bytes, 0, len), opts)
      end

      assert dump(t) == before
    end

    test "a bit flipped at every byte", %{target: t, before: before, key: key} do
      plain = snapshot!(populated())
      keyed = snapshot!(populated(), key: key)

      for {bytes, opts} <- [{plain, []}, {keyed, [key: key]}],
          index <- 0..(byte_size(bytes) - 1) do
        <<head::binary-size(index), byte, rest::binary>> = bytes

        flipped =
          <<head::binary, Bitwise.bxor(byte, Bitwise.bsl(1, rem(index, 8))), rest::binary>>

        assert {:error, _} = Session.restore(t, flipped, opts)
      end

      assert dump(t) == before
    end

    test "bytes appended or a byte dropped", %{target: t, before: before} do
      bytes = snapshot!(populated())
      rejected!(t, before, bytes <> <<0>>)
      rejected!(t, before, bytes <> bytes)
      <<_, rest::binary>> = bytes
      rejected!(t, before, rest)
    end

    test "wrong key, keyed bytes without a key, plain bytes with a key",
         %{target: t, before: before, key: key} do
      source = populated()
      keyed = snapshot!(source, key: key)
      plain = snapshot!(source)

      assert rejected!(t, before, keyed, key: key <> "x") =~ "HMAC mismatch"
      assert rejected!(t, before, keyed, key: "other") =~ "HMAC mismatch"
      assert rejected!(t, before, keyed) =~ "integrity check failed"
      assert rejected!(t, before, plain, key: key) =~ "HMAC mismatch"

      # The public checksum of unkeyed bytes must not be accepted as a MAC.
      assert binary_part(keyed, 32, byte_size(keyed) - 32) ==
               binary_part(plain, 32, byte_size(plain) - 32)
    end

    test "a forged body with a recomputed (public) checksum is decoded safely",
         %{target: t, before: before} do
      # Unkeyed bytes are `sha256("BKSNAP01" <> body) <> body`: anyone can
      # forge them, which is why `:key` exists. Forged garbage must still be
      # rejected cleanly by the decoder, not crash or half-apply.
      <<_digest::binary-size(32), body::binary>> = snapshot!(populated())
      reseal = fn body -> :crypto.hash(:sha256, "BKSNAP01" <> body) <> body end

      garbage = [
        binary_part(body, 0, div(byte_size(body), 2)),
        binary_part(body, 0, 8),
        "",
        "{}",
        ~s({"version": 1}),
        ~s({"version": 999, "shell": {}}),
        :crypto.strong_rand_bytes(512),
        body <> "trailing"
      ]

      for forged <- garbage, do: rejected!(t, before, reseal.(forged))

      # Flipping a byte and resealing: most flips break the framing or an
      # object hash; a few land in fields the format tolerates on purpose
      # (e.g. the informational schema version) and decode. Either way the
      # outcome is whole: rejected with nothing changed, or fully restored.
      baseline = snapshot!(t)

      outcomes =
        for i <- 8..(byte_size(body) - 1)//7 do
          <<head::binary-size(i), byte, rest::binary>> = body

          case Session.restore(
                 t,
                 reseal.(<<head::binary, Bitwise.bxor(byte, 0xFF), rest::binary>>)
               ) do
            {:error, _} ->
              assert dump(t) == before
              :rejected

            {:ok, _} ->
              restore!(t, baseline)
              :accepted
          end
        end

      assert Enum.count(outcomes, &(&1 == :rejected)) > length(outcomes) / 2
      assert dump(t) == before
    end

    test "a snapshot needing builtins the target lacks", %{target: t, before: before} do
      python_bytes = snapshot!(Session.new(python: true))
      message = rejected!(t, before, python_bytes)
      assert message =~ "missing builtins: python, python3"
    end

    test "the session stays usable after every kind of rejection", %{target: t} do
      for bytes <- ["", "junk", :crypto.strong_rand_bytes(4096)] do
        {:error, _} = Session.restore(t, bytes)
      end

      assert run!(t, "plain=new; echo $plain; greet you").stdout == "new\nhi you from greet\n"
      t = restore!(t, snapshot!(Session.new(env: [FRESH: "1"])))
      assert run!(t, "echo $FRESH").stdout == "1\n"
    end
  end

  describe "capabilities of the target survive a restore" do
    test "limits stay the target's" do
      source = Session.new()
      run!(source, "x=from-source")
      target = restore!(Session.new(limits: [max_commands: 5]), snapshot!(source))

      assert run!(target, "echo $x").stdout == "from-source\n"

      assert {:error, %{message: message}} =
               Session.run(target, "for i in 1 2 3 4 5 6 7 8; do :; done")

      assert message =~ "max_commands"

      # And the other way round: a limited source does not limit the target.
      limited = Session.new(limits: [max_commands: 5])
      run!(limited, "y=1")
      free = restore!(Session.new(), snapshot!(limited))
      assert run!(free, "for i in 1 2 3 4 5 6 7 8; do :; done; echo $y").stdout == "1\n"
    end

    test "cumulative usage carries over into the target's cumulative limits" do
      source = Session.new()
      for _ <- 1..5, do: run!(source, "true")
      target = restore!(Session.new(limits: [max_exec_calls: 7]), snapshot!(source))

      assert {:ok, _} = Session.exec(target, "true")
      assert {:ok, _} = Session.exec(target, "true")
      assert {:error, %{message: message}} = Session.run(target, "true")
      assert message =~ "exec() call limit exceeded (7 calls)"
    end

    test "python stays the target's: restoring a plain snapshot does not remove it" do
      target = restore!(Session.new(python: true), snapshot!(populated()))

      assert run!(target, ~S{python3 -c "print(open('/work/a.txt').read().strip())"}).stdout ==
               "text\n"

      # And a python snapshot restores into a python session.
      source = Session.new(python: [name: "py"])
      run!(source, ~S{py -c "from pathlib import Path; Path('/made_by_py').write_text('hi')"})
      target = restore!(Session.new(python: [names: ["py", "python3"]]), snapshot!(source))
      assert Session.read_file(target, "/made_by_py") == {:ok, "hi"}
      assert run!(target, "py -c 'print(1)'; python3 -c 'print(2)'").stdout == "1\n2\n"
    end

    test "custom builtins and virtual_fs backends stay the target's" do
      agent = MapFs.start(%{"/kept.txt" => "backend data\n"})

      target =
        Session.new(
          builtins: %{"kv" => fn %{args: [k]} -> {:ok, "value-of-#{k}\n"} end},
          virtual_fs: %{"/store" => {MapFs, agent}}
        )

      target = restore!(target, snapshot!(populated()))

      assert run!(target, ~S(kv "$plain"; cat /store/kept.txt; echo $plain > /store/new.txt)).stdout ==
               "value-of-p v\nbackend data\n"

      assert MapFs.contents(agent)["/new.txt"] == "p v\n"
      assert run!(target, "cat /work/a.txt").stdout == "text\n"
    end

    test "a snapshot never reads a virtual_fs backend, and does not carry its files" do
      parent = self()

      backend = fn request ->
        send(parent, {:backend, request})
        {:error, :enoent}
      end

      source = Session.new(virtual_fs: %{"/remote" => backend}, files: %{"/local.txt" => "l"})
      bytes = snapshot!(source)
      refute_received {:backend, _}

      target = restore!(Session.new(), bytes)
      assert Session.read_file(target, "/local.txt") == {:ok, "l"}
      assert run!(target, "ls /remote 2>/dev/null | wc -l").stdout == "0\n"
    end

    test "a snapshot of a session with custom builtins needs them in the target" do
      source = Session.new(builtins: %{"kv" => fn _ -> {:ok, ""} end})
      run!(source, "x=1")
      bytes = snapshot!(source)

      assert {:error, message} = Session.restore(Session.new(), bytes)
      assert message =~ "missing builtins: kv"

      # Same builtin names (the functions may differ) are enough.
      target = Session.new(builtins: %{"kv" => fn _ -> {:ok, "other impl\n"} end})
      target = restore!(target, bytes)
      assert run!(target, "echo $x; kv").stdout == "1\nother impl\n"
    end

    test "the filesystem API sees the restored files (the same filesystem, not a copy)" do
      target = restore!(Session.new(), snapshot!(populated()))
      assert Session.read_file(target, "/work/a.txt") == {:ok, "text\n"}
      :ok = Session.write_file(target, "/work/a.txt", "via api")
      assert run!(target, "cat /work/a.txt").stdout == "via api"
    end
  end

  describe "ordering with scripts" do
    test "a snapshot waits for the running script and captures its effects" do
      s = Session.new()

      running =
        Task.async(fn ->
          Session.exec(s, "while [ ! -e /go ]; do sleep 0.01; done; late=yes")
        end)

      wait_until_running(s)
      snap = Task.async(fn -> Session.snapshot(s) end)
      # Let the script finish only now: the snapshot cannot have run before.
      :ok = Session.write_file(s, "/go", "")

      assert {:ok, %Result{exit_code: 0}} = Task.await(running)
      assert {:ok, bytes} = Task.await(snap)
      assert run!(restore!(Session.new(), bytes), "echo $late").stdout == "yes\n"
    end

    test "a restore waits for the running script, then replaces its effects" do
      s = Session.new()
      bytes = snapshot!(Session.new(env: [FROM: "snapshot"]))

      running =
        Task.async(fn ->
          Session.exec(s, "while [ ! -e /go ]; do sleep 0.01; done; late=yes")
        end)

      wait_until_running(s)
      restoring = Task.async(fn -> Session.restore(s, bytes) end)
      :ok = Session.write_file(s, "/go", "")

      assert {:ok, _} = Task.await(running)
      assert {:ok, _} = Task.await(restoring)
      assert run!(s, "echo [$late][$FROM]").stdout == "[][snapshot]\n"
    end

    test "concurrent snapshots, restores and execs on one session stay consistent" do
      s = Session.new(files: %{"/count" => "0"})
      bytes = snapshot!(Session.new(files: %{"/count" => "0"}))

      results =
        1..60
        |> Task.async_stream(
          fn i ->
            case rem(i, 3) do
              0 -> Session.snapshot(s)
              1 -> Session.restore(s, bytes)
              2 -> Session.exec(s, "n=$(cat /count); echo $((n + 1)) > /count")
            end
          end,
          max_concurrency: 20,
          timeout: 30_000
        )
        |> Enum.map(fn {:ok, result} -> result end)

      assert Enum.all?(results, &match?({:ok, _}, &1))

      # Every snapshot is itself restorable.
      for {:ok, snap} when is_binary(snap) <- results do
        assert {:ok, _} = Session.restore(Session.new(), snap)
      end

      assert {:ok, count} = Session.read_file(s, "/count")
      assert String.to_integer(String.trim(count)) in 0..20
    end
  end

  describe "across BEAM nodes" do
    setup do
      peer = PeerNode.start()
      on_exit(fn -> PeerNode.stop(peer) end)

      %{peer: peer}
    end

    test "a snapshot taken here restores on another node, and back", %{peer: peer} do
      key = "shared secret"
      bytes = snapshot!(populated(), key: key)

      {result, os_pid} =
        PeerNode.call(peer, PeerNode, :restore_then, [
          [limits: [max_commands: 100]],
          bytes,
          [key: key],
          "echo $plain ${arr[1]}; greet peer; cat /work/a.txt; pwd"
        ])

      refute os_pid == System.pid()

      assert {:ok, %Result{stdout: "p v b c\nhi peer from greet\ntext\n/work/sub\n"}} = result

      # The other direction: taken on the peer, restored here.
      {{:ok, from_peer}, _} =
        PeerNode.call(peer, PeerNode, :snapshot_after, [
          [env: [ORIGIN: "peer"]],
          "cd /tmp; echo made-remotely > /tmp/r.txt; f() { echo remote-fn; }",
          [key: key]
        ])

      here = restore!(Session.new(), from_peer, key: key)

      assert run!(here, "echo $ORIGIN; pwd; cat r.txt; f").stdout ==
               "peer\n/tmp\nmade-remotely\nremote-fn\n"

      # Rejections behave the same over there.
      {wrong, _} =
        PeerNode.call(peer, PeerNode, :restore_then, [[], bytes, [key: "nope"], "true"])

      assert {:error, message} = wrong
      assert message =~ "HMAC mismatch"
    end
  end
end
