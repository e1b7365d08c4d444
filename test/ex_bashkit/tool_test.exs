defmodule ExBashkit.ToolTest do
  # The bash tool an LLM calls: its definition, the per-session system
  # prompt, and call/2's JSON-ready responses (truncation, timeouts, errors).
  use ExUnit.Case, async: true

  alias ExBashkit.{Session, Tool}
  alias ExBashkit.Test.HostDir

  doctest ExBashkit.Tool

  test "definition/0 is bashkit's tool contract, JSON-ready" do
    %{name: "bash", description: description, input_schema: schema} = Tool.definition()
    assert description =~ "in-memory filesystem"
    assert description =~ "Network access"
    assert description =~ "jq"

    assert schema == %{
             "type" => "object",
             "properties" => %{
               "commands" => %{
                 "type" => "string",
                 "description" => "Bash commands to run, as with bash -c"
               },
               "timeout_ms" => %{
                 "type" => "integer",
                 "minimum" => 1,
                 "description" => "Optional: stop the commands after this many milliseconds"
               }
             },
             "required" => ["commands"],
             "additionalProperties" => false
           }
  end

  test "system_prompt/1 describes this session: user, home, cwd, mounts, network, limits" do
    ro = HostDir.create!()
    rw = HostDir.create!()

    session =
      Session.new(
        username: "agent",
        cwd: "/workspace",
        mounts: [{"/workspace", ro, :read_only}],
        allow_net: ["https://api.example.com/v1"],
        limits: [max_commands: 500, timeout_ms: 5_000]
      )

    :ok = Session.mount(session, "/out", rw, :read_write)
    {:ok, _} = Session.exec(session, "cd /tmp")
    prompt = Tool.system_prompt(session)

    assert prompt =~ "User: agent (home /home/agent)"
    assert prompt =~ "Working directory: /tmp."
    assert prompt =~ "/out (read-write)"
    assert prompt =~ "/workspace (read-only)"
    assert prompt =~ "Network: only URLs under https://api.example.com/v1"
    assert prompt =~ "500 commands, 5 s"
    # Host paths are the application's business, not the model's.
    refute prompt =~ ro
    refute prompt =~ rw

    default = Tool.system_prompt(Session.new())
    assert default =~ "Network: none"
    assert default =~ "in memory only"
    assert default =~ "10000 commands, 30 s"
    assert Tool.system_prompt(Session.new(allow_net: :all)) =~ "Network: any URL"
  end

  describe "call/2" do
    test "separate streams, exit code, state kept across calls" do
      session = Session.new()
      assert Tool.call(session, %{"commands" => "x=42; cd /tmp"})["exit_code"] == 0

      assert Tool.call(session, %{"commands" => "echo $x $(pwd); ls /nope"}) == %{
               "stdout" => "42 /tmp\n",
               "stderr" => "ls: cannot access '/nope': No such file or directory\n",
               "exit_code" => 2,
               "error" => nil
             }
    end

    test "timeout: exit 124, output so far kept, session usable" do
      session = Session.new()

      response =
        Tool.call(session, %{"commands" => "v=1; echo started; sleep 10", "timeout_ms" => 1_000})

      assert response["exit_code"] == 124
      assert response["error"] == "timeout"
      assert response["stdout"] == "started\n"
      assert response["stderr"] =~ "timed out"
      assert Tool.call(session, %{"commands" => "echo again"})["stdout"] == "again\n"

      # The session's own limit is a timeout too.
      limited = Session.new(limits: [timeout_ms: 100])
      assert Tool.call(limited, %{"commands" => "sleep 10"})["exit_code"] == 124
    end

    test "a script that cannot run: exit 1 with the reason" do
      response = Tool.call(Session.new(), %{"commands" => "echo 'unterminated"})
      assert response["exit_code"] == 1
      assert is_binary(response["error"])
      assert response["stderr"] =~ response["error"]
    end

    test "invalid input: exit 2, never a crash" do
      session = Session.new()

      for input <- [
            %{},
            %{"commands" => 5},
            %{"commands" => "true", "timeout_ms" => 0},
            %{"commands" => "true", "timeout_ms" => "soon"},
            %{"commands" => <<255>>}
          ] do
        response = Tool.call(session, input)
        assert response["exit_code"] == 2, inspect(input)
        assert response["error"] =~ "invalid input"
      end

      assert Tool.call(session, "echo hi")["exit_code"] == 2
      assert Tool.call(session, %{commands: "echo atom keys"})["stdout"] == "atom keys\n"
      assert Tool.call(session, %{"commands" => "echo x", "timeout_ms" => nil})["stdout"] == "x\n"
    end

    test "stdout and stderr are each cut to 2 000 lines, with a marker line" do
      session = Session.new(limits: [max_loop_iterations: 100_000, max_commands: 1_000_000])
      response = Tool.call(session, %{"commands" => "seq 1 50213; seq 1 3 >&2"})
      lines = String.split(response["stdout"], "\n", trim: true)
      assert length(lines) == 2_001
      assert Enum.at(lines, 1_999) == "2000"
      assert List.last(lines) == "[output truncated: 48213 more lines]"
      assert response["stderr"] == "1\n2\n3\n"
    end

    test "and to 50 KB, at a line boundary when there is one" do
      session = Session.new()
      # 1 000 lines of 100 bytes: 100 KB in fewer than 2 000 lines.
      line = String.duplicate("x", 99)

      response =
        Tool.call(session, %{"commands" => "for i in $(seq 1 1000); do echo #{line}; done"})

      [marker | kept] = response["stdout"] |> String.split("\n", trim: true) |> Enum.reverse()
      assert length(kept) == 512
      assert byte_size(response["stdout"]) <= 50 * 1024 + 100
      assert marker == "[output truncated: 488 more lines]"

      # One huge line: cut inside it, on a character boundary.
      big = String.duplicate("é", 40_000)
      session = Session.new(files: %{"/big" => big})
      response = Tool.call(session, %{"commands" => "cat /big"})
      [cut, marker] = String.split(response["stdout"], "\n", trim: true)
      assert String.valid?(cut)
      assert byte_size(cut) <= 50 * 1024
      assert marker == "[output truncated: 1 more line]"
    end

    test "non-UTF-8 output is made JSON-safe" do
      session = Session.new(files: %{"/bin.dat" => <<"ok ", 0xFF, 0xFE, "\n">>})
      response = Tool.call(session, %{"commands" => "cat /bin.dat"})
      assert String.valid?(response["stdout"])
      assert response["stdout"] =~ "ok "
    end
  end

  test "cut/2 leaves short output alone and flags the session's byte cap" do
    assert Tool.cut("a\nb\n", false) == "a\nb\n"
    assert Tool.cut("", false) == ""

    assert Tool.cut("a\n", true) ==
             "a\n[output truncated: more dropped by the session's byte cap]\n"
  end
end
