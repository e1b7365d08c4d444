defmodule ExBashkit.Callbacks.AnswerTest do
  # What a builtin or a virtual_fs backend returns cannot hurt the node
  # (issue 19): malformed listings, reply caps, handlers stopped with their
  # script, exit codes, option validation.
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.{Result, Session}

  defp failed!(session, script) do
    assert %Result{exit_code: code, stderr: stderr} = run!(session, script)
    assert code != 0, "expected #{inspect(script)} to fail"
    stderr
  end

  # A backend whose root lists `entries` and whose every other path is a file.
  defp listing_fs(entries) do
    fn
      %{op: :list, path: "/"} -> {:ok, entries}
      %{op: :stat, path: "/"} -> {:ok, %{type: :dir, size: 0}}
      %{op: :stat} -> {:ok, %{type: :file, size: 1}}
      %{op: :read} -> {:ok, "x"}
    end
  end

  describe "malformed listings fail that operation; the session stays usable" do
    test "bad names" do
      for bad <- ["", ".", "..", "a/b", "/", "nul\0byte", <<255, 254>>, :atom_name, 42] do
        s = Session.new(virtual_fs: %{"/h" => listing_fs([{"good", :file}, {bad, :file}])})
        stderr = failed!(s, "ls /h")
        assert stderr =~ "malformed", "#{inspect(bad)}: #{stderr}"
        assert run!(s, "echo alive").stdout == "alive\n"
      end
    end

    test "an unknown entry type is an error, never silently a file" do
      s = Session.new(virtual_fs: %{"/h" => listing_fs([{"good", :file}, {"odd", :socket}])})
      stderr = failed!(s, "ls /h")
      assert stderr =~ "unknown type"
      assert failed!(s, "find /h -type f") =~ "unknown type"
    end

    test "entries of the wrong shape and improper lists" do
      for entries <- [[{"a", :file, :extra}], [{"a", :file} | :tail], [nil]] do
        s = Session.new(virtual_fs: %{"/h" => listing_fs(entries)})
        assert failed!(s, "ls /h") =~ "malformed"
      end
    end

    test "duplicates are listed once" do
      s = Session.new(virtual_fs: %{"/h" => listing_fs([{"a", :file}, {"a", :file}, "b"])})
      assert run!(s, "ls /h").stdout == "a\nb\n"
    end

    test "a backend reporting ever-deeper directories is bounded by the depth cap" do
      parent = self()

      backend = fn
        %{op: :list, path: path} ->
          send(parent, {:listed, path})
          {:ok, [{"d", :dir}]}

        %{op: :stat} ->
          {:ok, %{type: :dir, size: 0}}
      end

      s = Session.new(virtual_fs: %{"/deep" => backend})
      stderr = failed!(s, "find /deep > /dev/null")
      assert stderr =~ "levels deep"

      depths = for {:listed, path} <- drain(), do: length(String.split(path, "/", trim: true))

      assert Enum.max(depths) == 64
      assert run!(s, "echo alive").stdout == "alive\n"
    end
  end

  describe ":max_reply_bytes" do
    test "builtin stdout and stderr together are capped" do
      s =
        Session.new(
          max_reply_bytes: 1_000,
          builtins: %{
            "fits" => fn _ -> {:ok, :binary.copy("a", 1_000)} end,
            "big" => fn _ -> {:ok, :binary.copy("a", 1_001)} end,
            "both" => fn _ ->
              %Result{stdout: :binary.copy("o", 600), stderr: :binary.copy("e", 600)}
            end,
            "iolist" => fn _ -> {:ok, List.duplicate("ab", 501)} end,
            "err" => fn _ -> {:error, :binary.copy("e", 2_000)} end
          }
        )

      assert byte_size(run!(s, "fits").stdout) == 1_000

      for name <- ["big", "both", "iolist", "err"] do
        assert %Result{exit_code: 1, stdout: "", stderr: stderr} = run!(s, name)
        assert stderr =~ "#{name}: reply of"
        assert stderr =~ "exceeds the session's :max_reply_bytes (1000)"
      end
    end

    test "virtual_fs read data, error messages and listings are capped" do
      s =
        Session.new(
          max_reply_bytes: 1_000,
          virtual_fs: %{
            "/v" => fn
              %{op: :read, path: "/small"} ->
                {:ok, :binary.copy("s", 1_000)}

              %{op: :read, path: "/big"} ->
                {:ok, [:binary.copy("b", 600), :binary.copy("b", 600)]}

              %{op: :read, path: "/loud"} ->
                {:error, :binary.copy("!", 1_001)}

              %{op: :list, path: "/"} ->
                {:ok, for(i <- 1..15, do: {"f#{i}", :file})}

              %{op: :list, path: "/many"} ->
                {:ok, for(i <- 1..16, do: {"f#{i}", :file})}

              %{op: :stat} ->
                {:ok, %{type: :dir, size: 0}}
            end
          }
        )

      assert byte_size(run!(s, "cat /v/small").stdout) == 1_000

      assert failed!(s, "cat /v/big") =~
               "reply of 1200 bytes exceeds the session's :max_reply_bytes"

      assert failed!(s, "cat /v/loud") =~ ":max_reply_bytes"
      # 15 entries: 15 * 64 bytes of overhead + the names stays under 1000;
      # 16 entries passes it although the names alone are 39 bytes.
      assert run!(s, "ls /v | wc -l").stdout =~ "15"
      assert failed!(s, "ls /v/many") =~ "listing too large"
      assert run!(s, "echo alive").stdout == "alive\n"
    end

    test "the default caps a reply too, and nil or a bad value is refused" do
      big = :binary.copy("x", 10_000_001)
      s = Session.new(builtins: %{"big" => fn _ -> {:ok, big} end})
      assert %Result{exit_code: 1, stderr: stderr} = run!(s, "big")
      assert stderr =~ ":max_reply_bytes (10000000)"

      for bad <- [nil, 0, -1, 1.5, "10", :infinity] do
        assert_raise ArgumentError, ~r/:max_reply_bytes must be a positive integer/, fn ->
          Session.new(max_reply_bytes: bad)
        end
      end
    end
  end

  describe "a back-call's handler is stopped with its script" do
    defp blocking_builtin(parent) do
      fn _ ->
        send(parent, {:handler, self()})
        Process.sleep(3_000)
        send(parent, :side_effect)
        {:ok, "late\n"}
      end
    end

    test "when the exec times out" do
      s = Session.new(builtins: %{"block" => blocking_builtin(self())})
      assert {:error, %{message: message}} = Session.run(s, "block", timeout_ms: 1_000)
      assert message =~ "timed out"
      assert_received {:handler, handler}
      refute Process.alive?(handler)
      refute_receive :side_effect, 3_000
      assert run!(s, "echo alive").stdout == "alive\n"
    end

    test "when the exec is cancelled" do
      s = Session.new(builtins: %{"block" => blocking_builtin(self())})
      task = Task.async(fn -> Session.run(s, "block; echo after") end)
      assert_receive {:handler, handler}, 5_000
      assert Session.cancel(s) == :ok
      assert {:error, %{message: message}} = Task.await(task, 5_000)
      assert message =~ "cancel"
      refute Process.alive?(handler)
      refute_receive :side_effect, 3_000
    end

    test "when a virtual_fs backend is still running" do
      parent = self()

      backend = fn _ ->
        send(parent, {:handler, self()})
        Process.sleep(3_000)
        send(parent, :side_effect)
        {:ok, "late"}
      end

      s = Session.new(virtual_fs: %{"/slow" => backend})
      assert {:error, _} = Session.exec(s, "cat /slow/x", timeout_ms: 1_000)
      assert_received {:handler, handler}
      refute Process.alive?(handler)
      refute_receive :side_effect, 3_000
    end

    test "when the handler passes builtin_timeout_ms" do
      s = Session.new(builtin_timeout_ms: 100, builtins: %{"block" => blocking_builtin(self())})
      assert %Result{exit_code: 124, stderr: stderr} = run!(s, "block")
      assert stderr =~ "builtin timed out after 100 ms"
      assert_received {:handler, handler}
      refute Process.alive?(handler)
      refute_receive :side_effect, 3_000
    end
  end

  describe "builtins" do
    test "an exit code outside 0..255 is masked mod 256" do
      codes = [256, 257, -1, 1_000, 2 ** 40 + 3, -(2 ** 70)]

      builtins =
        Map.new(Enum.with_index(codes), fn {code, i} ->
          {"code#{i}", fn _ -> %Result{exit_code: code} end}
        end)

      s = Session.new(builtins: builtins)

      for {code, i} <- Enum.with_index(codes) do
        assert run!(s, "code#{i}").exit_code == Integer.mod(code, 256)
        assert run!(s, "code#{i}; echo $?").stdout == "#{Integer.mod(code, 256)}\n"
      end
    end

    test "a builtin name that is not a string raises" do
      for name <- [:greet, 42, ~c"greet"] do
        assert_raise ArgumentError, ~r/:builtins name must be a string/, fn ->
          Session.new(builtins: %{name => fn _ -> {:ok, ""} end})
        end
      end
    end

    test ":builtin_timeout_ms above the VM's receive ceiling raises at new/1" do
      assert %Session{} = Session.new(builtin_timeout_ms: 4_294_967_295)

      for too_long <- [4_294_967_296, 10 ** 30] do
        assert_raise ArgumentError, ~r/at most 4294967295/, fn ->
          Session.new(builtin_timeout_ms: too_long)
        end
      end
    end
  end

  describe "mount paths must be normalized" do
    setup do
      host = Path.join(System.tmp_dir!(), "ex_bashkit_norm_#{System.unique_integer([:positive])}")
      File.mkdir_p!(host)
      on_exit(fn -> File.rm_rf!(host) end)
      %{host: host}
    end

    @unnormalized ["/a/./b", "/a/../b", "//x", "/data/", "/data/.", "/a//b"]

    test ":virtual_fs" do
      for path <- @unnormalized do
        assert_raise ArgumentError, ~r/must be normalized/, fn ->
          Session.new(virtual_fs: %{path => fn _ -> {:error, :enoent} end})
        end
      end
    end

    test ":mounts", %{host: host} do
      for path <- @unnormalized do
        assert_raise ArgumentError, ~r/must be normalized/, fn ->
          Session.new(mounts: [{path, host, :read_only}])
        end
      end

      assert %Session{} = Session.new(mounts: [{"/data", host, :read_only}])
    end

    test "two spellings of one path are a conflict", %{host: host} do
      backend = fn _ -> {:error, :enoent} end

      assert_raise ArgumentError, ~r/conflict/, fn ->
        Session.new(virtual_fs: [{"/data", backend}, {~c"/data", backend}])
      end

      assert_raise ArgumentError, ~r/conflict/, fn ->
        Session.new(virtual_fs: [{"/data", backend}, {"/data", backend}])
      end

      assert_raise ArgumentError, ~r/one path takes one mount/, fn ->
        Session.new(mounts: [{"/data", host, :read_only}, {~c"/data", host, :read_only}])
      end

      assert_raise ArgumentError, ~r/one path takes one mount/, fn ->
        Session.new(mounts: [{"/data", host, :read_only}], virtual_fs: %{~c"/data" => backend})
      end
    end
  end

  defp drain(acc \\ []) do
    receive do
      message -> drain([message | acc])
    after
      0 -> Enum.reverse(acc)
    end
  end
end
