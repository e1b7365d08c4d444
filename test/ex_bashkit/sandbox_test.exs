defmodule ExBashkit.SandboxTest do
  # ExBashkit.Sandbox through its public callbacks, called the way Condukt's
  # facade and tools call them (`Facade` below mirrors `Condukt.Sandbox`'s
  # dispatch, including its `function_exported?/3` checks for the optional
  # callbacks), against real host directories for mounts.
  use ExUnit.Case, async: true

  alias ExBashkit.Sandbox
  alias ExBashkit.Test.{HostDir, MapFs}

  doctest ExBashkit.Sandbox

  # What Condukt.Sandbox's facade does with a sandbox module and its state.
  defmodule Facade do
    @moduledoc false
    defstruct [:module, :state]

    def new(module, opts) do
      with {:ok, state} <- module.init(opts), do: {:ok, %__MODULE__{module: module, state: state}}
    end

    def read(%{module: m, state: s}, path), do: m.read_file(s, path)
    def write(%{module: m, state: s}, path, content), do: m.write_file(s, path, content)
    def edit(%{module: m, state: s}, path, old, new), do: m.edit_file(s, path, old, new)
    def exec(%{module: m, state: s}, command, opts \\ []), do: m.exec(s, command, opts)
    def cwd(%{module: m, state: s}), do: m.cwd(s)
    def shutdown(%{module: m, state: s}), do: m.shutdown(s)

    def glob(%{module: m, state: s}, pattern, opts \\ []),
      do: optional(m, :glob, fn -> m.glob(s, pattern, opts) end)

    def grep(%{module: m, state: s}, pattern, opts \\ []),
      do: optional(m, :grep, fn -> m.grep(s, pattern, opts) end)

    def mount(%{module: m, state: s}, host, vfs),
      do: optional(m, :mount, fn -> m.mount(s, host, vfs) end)

    defp optional(module, name, call) do
      if function_exported?(module, name, 3), do: call.(), else: {:error, :not_supported}
    end
  end

  defp sandbox!(opts \\ []) do
    {:ok, sandbox} = Facade.new(Sandbox, opts)
    sandbox
  end

  describe "init/1" do
    test "never raises for bad options" do
      bad = [
        :not_a_keyword,
        [mounts: :nope],
        [mounts: [{"/x"}]],
        [mounts: [{"/no/such/dir", "/w", :readonly}]],
        [mounts: [{"/etc", "/w", :readonly}]],
        [cwd: "relative"],
        [cwd: 42],
        [persistent: "yes"],
        [mount_mode: :sometimes],
        [limits: [bogus: 1]],
        [limits: :nope],
        [unknown_option: 1],
        [env: 5],
        [files: %{"/a" => :not_iodata}]
      ]

      for opts <- bad do
        assert {:error, message} = Sandbox.init(opts), "#{inspect(opts)} should be refused"
        assert is_binary(message)
      end
    end

    test "Condukt's mount shapes, and the Session's, against real host directories" do
      ro = HostDir.create!(%{"in.txt" => "input\n"})
      rw = HostDir.create!()
      also_rw = HostDir.create!()
      session_style = HostDir.create!(%{"s.txt" => "s"})

      sb =
        sandbox!(
          mounts: [
            {ro, "/in", :readonly},
            {rw, "/out", :readwrite},
            {also_rw, "/out2"},
            {"/sess", session_style, :read_only}
          ]
        )

      assert Facade.read(sb, "/in/in.txt") == {:ok, "input\n"}
      assert {:ok, %{exit_code: code}} = Facade.exec(sb, "echo x > /in/new.txt")
      assert code != 0
      refute File.exists?(Path.join(ro, "new.txt"))

      assert :ok = Facade.write(sb, "/out/result.txt", "done\n")
      assert File.read!(Path.join(rw, "result.txt")) == "done\n"
      assert {:ok, %{exit_code: 0}} = Facade.exec(sb, "echo y > /out2/y.txt")
      assert File.read!(Path.join(also_rw, "y.txt")) == "y\n"
      assert Facade.read(sb, "/sess/s.txt") == {:ok, "s"}
    end

    test "every Session.new/1 option passes through" do
      sb =
        sandbox!(
          env: %{"GREETING" => "hi"},
          files: %{"/seed.txt" => "seeded"},
          username: "agent",
          limits: [max_commands: 100]
        )

      assert Facade.exec(sb, "echo $GREETING $(whoami) $(cat /seed.txt)") ==
               {:ok, %{output: "hi agent seeded\n", exit_code: 0}}

      assert {:error, message} = Facade.exec(sb, "for i in $(seq 1 1000); do :; done")
      assert message =~ "max_commands"
    end

    test ":cwd is the base, created if missing, and relative paths resolve against it" do
      sb = sandbox!(cwd: "/home/user/project")
      assert Facade.cwd(sb) == "/home/user/project"
      assert Facade.exec(sb, "pwd") == {:ok, %{output: "/home/user/project\n", exit_code: 0}}
      assert :ok = Facade.write(sb, "src/a.txt", "A")
      assert Facade.read(sb, "/home/user/project/src/a.txt") == {:ok, "A"}
      assert Facade.read(sb, "../project/src/a.txt") == {:ok, "A"}
    end
  end

  describe "exec/3" do
    test "stdout and stderr merged in the order they were written" do
      sb = sandbox!()
      script = "for i in 1 2 3; do echo out$i; echo err$i >&2; done; echo end"

      assert Facade.exec(sb, script) ==
               {:ok, %{output: "out1\nerr1\nout2\nerr2\nout3\nerr3\nend\n", exit_code: 0}}
    end

    test ":cwd, :env (map or pairs)" do
      sb = sandbox!(files: %{"/proj/sub/f.txt" => "f"})

      assert Facade.exec(sb, "pwd; ls", cwd: "/proj/sub") ==
               {:ok, %{output: "/proj/sub\nf.txt\n", exit_code: 0}}

      assert Facade.exec(sb, "pwd", cwd: "proj") == {:ok, %{output: "/proj\n", exit_code: 0}}
      assert {:ok, %{exit_code: 1}} = Facade.exec(sb, "pwd", cwd: "/missing")

      assert Facade.exec(sb, ~S(echo "$A|$B"), env: %{"A" => "it's", "B" => "x y"}) ==
               {:ok, %{output: "it's|x y\n", exit_code: 0}}

      assert Facade.exec(sb, "echo $TOKEN", env: [{"TOKEN", "secret"}]) ==
               {:ok, %{output: "secret\n", exit_code: 0}}

      assert {:error, _} = Facade.exec(sb, "true", env: [{"BAD NAME", "x"}])
    end

    test "persistent: false resets cwd, variables, functions and aliases; files persist" do
      sb = sandbox!(cwd: "/work")

      assert {:ok, %{exit_code: 0}} =
               Facade.exec(
                 sb,
                 "cd /tmp; export E=1; v=2; f() { echo fn; }; alias al='echo al'; echo data > /work/kept.txt"
               )

      assert {:ok, %{output: output}} =
               Facade.exec(
                 sb,
                 ~S(pwd; echo "E=$E v=$v"; type f >/dev/null 2>&1 || echo no-f; al 2>/dev/null || echo no-alias; cat kept.txt)
               )

      assert output == "/work\nE= v=\nno-f\nno-alias\ndata\n"

      # :env and :cwd of one call do not leak into the next either.
      {:ok, _} = Facade.exec(sb, "true", env: %{"ONCE" => "1"}, cwd: "/tmp")
      assert Facade.exec(sb, "echo $ONCE; pwd") == {:ok, %{output: "\n/work\n", exit_code: 0}}
    end

    test "persistent: true keeps shell state like a Session" do
      sb = sandbox!(persistent: true)
      {:ok, _} = Facade.exec(sb, "cd /tmp; x=1; f() { echo fn; }")
      assert Facade.exec(sb, "pwd; echo $x; f") == {:ok, %{output: "/tmp\n1\nfn\n", exit_code: 0}}
    end

    test "an unknown option is refused, naming the valid ones" do
      sb = sandbox!()

      assert {:error, "unknown exec/3 option :timeout_ms (valid: :cwd, :env, :timeout)"} =
               Facade.exec(sb, "echo never", timeout_ms: 100)

      assert {:ok, %{output: "ok\n"}} = Facade.exec(sb, "echo ok", timeout: 5_000)
    end

    test "a timeout is {:error, :timeout} and the sandbox stays usable" do
      sb = sandbox!(persistent: true)
      {:ok, _} = Facade.exec(sb, "kept=yes")
      assert Facade.exec(sb, "echo before; sleep 10", timeout: 100) == {:error, :timeout}

      assert Facade.exec(sb, "echo $kept", timeout: 5_000) ==
               {:ok, %{output: "yes\n", exit_code: 0}}

      # The session's own :timeout_ms limit is a timeout too.
      sb = sandbox!(limits: [timeout_ms: 100])
      assert Facade.exec(sb, "sleep 10", timeout: 60_000) == {:error, :timeout}
      assert {:ok, %{output: "ok\n"}} = Facade.exec(sb, "echo ok")
    end

    test "a script that cannot run is an error, not a timeout" do
      sb = sandbox!()
      assert {:error, message} = Facade.exec(sb, "echo 'unterminated", timeout: 1_000)
      assert is_binary(message)
      assert {:ok, %{exit_code: 0}} = Facade.exec(sb, "true")
    end
  end

  describe "files" do
    test "read, write (parents created), errors as File atoms" do
      sb = sandbox!()
      assert :ok = Facade.write(sb, "/a/b/c/file.bin", <<0, 255, 1>>)
      assert Facade.read(sb, "/a/b/c/file.bin") == {:ok, <<0, 255, 1>>}
      assert Facade.read(sb, "/a/missing") == {:error, :enoent}
      assert Facade.read(sb, "/a/b") == {:error, :eisdir}
      assert Facade.write(sb, "/a/b", "x") == {:error, :eisdir}
      assert {:error, _} = Sandbox.write_file(sb.state, "/x", :not_binary)
    end

    test "edit writes only when old text occurs exactly once" do
      sb = sandbox!(files: %{"/f.txt" => "one two two\n"})

      assert Facade.edit(sb, "/f.txt", "one", "ONE") ==
               {:ok, %{occurrences: 1, content: "ONE two two\n"}}

      assert Facade.read(sb, "/f.txt") == {:ok, "ONE two two\n"}

      assert Facade.edit(sb, "/f.txt", "two", "2") ==
               {:ok, %{occurrences: 2, content: "ONE two two\n"}}

      assert Facade.edit(sb, "/f.txt", "three", "3") ==
               {:ok, %{occurrences: 0, content: "ONE two two\n"}}

      assert Facade.edit(sb, "/f.txt", "", "x") ==
               {:ok, %{occurrences: 0, content: "ONE two two\n"}}

      assert Facade.read(sb, "/f.txt") == {:ok, "ONE two two\n"}
      assert Facade.edit(sb, "/nope.txt", "a", "b") == {:error, :enoent}
    end

    test "edit through a read-only host mount reports the refusal" do
      host = HostDir.create!(%{"ro.txt" => "keep\n"})
      sb = sandbox!(mounts: [{host, "/ro", :readonly}])
      assert {:error, message} = Facade.edit(sb, "/ro/ro.txt", "keep", "changed")
      assert is_binary(message)
      assert File.read!(Path.join(host, "ro.txt")) == "keep\n"
    end
  end

  describe "history" do
    test "commit, then checkout undoes files; log and diff; bad ids and meta are errors" do
      {:ok, sandbox} = Sandbox.init(cwd: "/work")
      :ok = Sandbox.write_file(sandbox, "a.txt", "one")
      {:ok, one} = Sandbox.commit(sandbox, %{step: "1"})
      {:ok, %{exit_code: 0}} = Sandbox.exec(sandbox, "echo two > a.txt; touch b.txt", [])

      assert {:ok, %{created: ["/work/b.txt"], modified: ["/work/a.txt"], deleted: []}} =
               Sandbox.diff(sandbox, one)

      assert :ok = Sandbox.checkout(sandbox, one)
      assert {:ok, "one"} = Sandbox.read_file(sandbox, "a.txt")
      assert {:error, :enoent} = Sandbox.read_file(sandbox, "b.txt")
      assert {:ok, [%{id: ^one, meta: %{"step" => "1"}}]} = Sandbox.log(sandbox)

      assert {:error, "no commit " <> _} = Sandbox.checkout(sandbox, String.duplicate("b", 64))
      assert {:error, _} = Sandbox.commit(sandbox, :not_a_map)
      assert {:ok, "one"} = Sandbox.read_file(sandbox, "a.txt")
    end
  end

  describe "glob/3 and grep/3" do
    test "relative to the cwd, sorted, ** recursive, :limit" do
      sb =
        sandbox!(
          cwd: "/p",
          files: %{"/p/a.ex" => "", "/p/lib/b.ex" => "", "/p/lib/x/c.ex" => "", "/p/d.md" => ""}
        )

      assert Facade.glob(sb, "**/*.ex") == {:ok, ["a.ex", "lib/b.ex", "lib/x/c.ex"]}
      assert Facade.glob(sb, "*.ex", cwd: "lib") == {:ok, ["b.ex"]}
      assert Facade.glob(sb, "**/*.ex", limit: 2) == {:ok, ["a.ex", "lib/b.ex"]}
      assert {:error, _} = Facade.glob(sb, "*", limit: "many")
    end

    test "grep: :path, :glob, :case_sensitive, :limit, bad regex" do
      sb =
        sandbox!(
          cwd: "/p",
          files: %{"/p/lib/a.ex" => "Hello\nhello\n", "/p/notes.md" => "hello\n"}
        )

      assert Facade.grep(sb, "hello") ==
               {:ok,
                [
                  %{path: "lib/a.ex", line_number: 2, line: "hello"},
                  %{path: "notes.md", line_number: 1, line: "hello"}
                ]}

      assert Facade.grep(sb, "hello", path: "lib", case_sensitive: false) ==
               {:ok,
                [
                  %{path: "a.ex", line_number: 1, line: "Hello"},
                  %{path: "a.ex", line_number: 2, line: "hello"}
                ]}

      assert {:ok, [%{path: "notes.md"}]} = Facade.grep(sb, "hello", glob: "*.md")
      assert {:ok, [_]} = Facade.grep(sb, "hello", limit: 1)
      assert {:error, {:invalid_regex, message, _}} = Facade.grep(sb, "[unclosed")
      assert is_binary(message)
    end

    test "walk host mounts and virtual_fs backends" do
      host = HostDir.create!(%{"src/app.py" => "TODO: fix\n", "src/ok.py" => "fine\n"})
      agent = MapFs.start(%{"/t.txt" => "TODO: api\n"})
      sb = sandbox!(mounts: [{host, "/repo", :readonly}], virtual_fs: %{"/api" => {MapFs, agent}})

      # An absolute pattern or :path gives absolute paths (Condukt's answers).
      assert Facade.glob(sb, "/repo/**/*.py") == {:ok, ["/repo/src/app.py", "/repo/src/ok.py"]}
      assert Facade.glob(sb, "repo/**/*.py") == {:ok, ["repo/src/app.py", "repo/src/ok.py"]}

      assert {:ok, [%{path: "/repo/src/app.py"}]} = Facade.grep(sb, "TODO", path: "/repo")

      assert {:ok, [%{path: "/repo/src/app.py"}]} =
               Facade.grep(sb, "TODO", path: "/repo/src/app.py")

      assert {:ok, [%{path: "src/app.py"}]} = Facade.grep(sb, "TODO", path: "repo")

      assert {:ok, [%{path: "repo/src/app.py"}, %{path: "api/t.txt"}] = matches} =
               Facade.grep(sb, "TODO", glob: "*.{py,txt}") |> sort_paths_desc()

      assert length(matches) == 2
    end
  end

  describe "mount/3" do
    test "mounts at runtime with the checks of :mounts" do
      host = HostDir.create!(%{"late.txt" => "late\n"})
      sb = sandbox!(cwd: "/w", mount_mode: :read_only)
      assert Facade.mount(sb, host, "extra") == :ok
      assert Facade.read(sb, "/w/extra/late.txt") == {:ok, "late\n"}
      assert {:ok, %{exit_code: code}} = Facade.exec(sb, "echo x > extra/new.txt")
      assert code != 0
      assert {:error, _} = Facade.mount(sb, host, "extra")
      assert {:error, _} = Facade.mount(sb, "/etc", "/etc2")
      assert {:error, _} = Facade.mount(sb, Path.join(host, "missing"), "/m")
      assert {:error, _} = Facade.mount(sb, host, "/")

      # Read-write by default, as Condukt's Virtual sandbox mounts.
      rw = HostDir.create!()
      sb = sandbox!()
      assert Facade.mount(sb, rw, "/rw") == :ok
      assert {:ok, %{exit_code: 0}} = Facade.exec(sb, "echo w > /rw/w.txt")
      assert File.read!(Path.join(rw, "w.txt")) == "w\n"
    end
  end

  test "shutdown/1 is :ok" do
    assert Facade.shutdown(sandbox!()) == :ok
  end

  test "every callback Condukt's behaviour declares is exported" do
    Code.ensure_loaded!(Sandbox)

    for {name, arity} <- [
          init: 1,
          shutdown: 1,
          cwd: 1,
          read_file: 2,
          write_file: 3,
          edit_file: 4,
          exec: 3,
          glob: 3,
          grep: 3,
          mount: 3
        ] do
      assert function_exported?(Sandbox, name, arity), "#{name}/#{arity}"
    end
  end

  # An agent's turn as Condukt's tools make it: Write, Edit, Grep, Bash,
  # Read, Glob, each through the facade with the options those tools pass.
  test "a scripted agent loop" do
    workspace = HostDir.create!(%{"README.md" => "# Project\n"})
    sb = sandbox!(mounts: [{workspace, "/workspace", :readwrite}], cwd: "/workspace")

    # Write: a script with a bug.
    script = """
    #!/bin/bash
    greet() {
      echo "Helo, $1"
    }
    for name in ada grace; do
      greet "$name"
    done
    """

    assert :ok = Facade.write(sb, "bin/greet.sh", script)

    # Bash: run it (Condukt's Bash tool passes :timeout in ms and :env).
    assert Facade.exec(sb, "bash bin/greet.sh", timeout: 120_000, env: []) ==
             {:ok, %{output: "Helo, ada\nHelo, grace\n", exit_code: 0}}

    # Grep: find the typo.
    assert Facade.grep(sb, "Helo", case_sensitive: true, limit: 200) ==
             {:ok, [%{path: "bin/greet.sh", line_number: 3, line: ~S(  echo "Helo, $1")}]}

    # Edit: fix it (the old text occurs once).
    assert {:ok, %{occurrences: 1, content: fixed}} =
             Facade.edit(sb, "bin/greet.sh", "Helo,", "Hello,")

    assert fixed =~ "Hello, $1"

    # Bash again, in a subdirectory, with a secret in the env.
    assert Facade.exec(sb, "bash greet.sh && echo \"token=$TOKEN\"",
             cwd: "bin",
             env: [{"TOKEN", "t0k"}],
             timeout: 120_000
           ) == {:ok, %{output: "Hello, ada\nHello, grace\ntoken=t0k\n", exit_code: 0}}

    # Glob and Read: what the agent left behind, on the real host directory.
    assert Facade.glob(sb, "**/*", limit: 1_000) == {:ok, ["README.md", "bin", "bin/greet.sh"]}
    assert {:ok, ^fixed} = Facade.read(sb, "bin/greet.sh")
    assert File.read!(Path.join(workspace, "bin/greet.sh")) == fixed

    # The Bash tool's calls are stateless: the env did not stick.
    assert Facade.exec(sb, "echo \"[$TOKEN]\"; pwd") ==
             {:ok, %{output: "[]\n/workspace\n", exit_code: 0}}
  end

  defp sort_paths_desc({:ok, matches}), do: {:ok, Enum.sort_by(matches, & &1.path, :desc)}
end
