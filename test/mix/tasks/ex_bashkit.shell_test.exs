defmodule Mix.Tasks.ExBashkit.ShellTest do
  # `mix ex_bashkit.shell` as a user runs it, through a pipe: a real OS
  # process (a child `mix` in this project, MIX_ENV=test, already compiled).
  # Each child is bounded by coreutils' `timeout`.
  use ExBashkit.Test.Case, async: false

  alias ExBashkit.Session
  alias ExBashkit.Test.HostDir

  @moduletag timeout: 120_000
  @root File.cwd!()

  # Run the task on `input` with `args`; `{stdout, stderr, exit_status}`.
  # stderr loses cargo's build lines (the task sends build output there).
  defp mix_shell(input, args \\ [], env \\ []) do
    input_file = tmp_path("in")
    err_file = tmp_path("err")
    File.write!(input_file, input)

    command =
      "exec timeout 25 mix ex_bashkit.shell #{Enum.map_join(args, " ", &sh_quote/1)} " <>
        "< #{sh_quote(input_file)} 2> #{sh_quote(err_file)}"

    {out, status} = System.cmd("sh", ["-c", command], cd: @root, env: [{"MIX_ENV", "test"} | env])
    {out, build_lines_out(File.read!(err_file)), status}
  end

  defp build_lines_out(text) do
    text
    |> String.split("\n")
    |> Enum.reject(&(&1 =~ ~r/^\s*(Finished|Blocking|Compiling|Generated|warning: )/))
    |> Enum.join("\n")
  end

  defp sh_quote(arg), do: "'" <> String.replace(arg, "'", ~S('\'')) <> "'"

  test "printf 'echo hi\\n' | mix ex_bashkit.shell prints hi" do
    {out, 0} =
      System.cmd(
        "sh",
        ["-c", "printf 'echo hi\\n' | timeout 25 mix ex_bashkit.shell 2>/dev/null"],
        cd: @root,
        env: [{"MIX_ENV", "test"}]
      )

    assert out == "hi\n"
  end

  test "multi-line commands, stdout and stderr apart, exit status of exit N" do
    input = """
    for i in 1 2; do
      echo n$i
    done
    echo to-stderr >&2
    cat <<EOF
    body
    EOF
    exit 3
    echo never
    """

    {out, err, status} = mix_shell(input)
    assert out == "n1\nn2\nbody\n"
    assert err =~ "to-stderr\n"
    refute err =~ "never"
    assert status == 3
  end

  test "the exit status is the last command's; meta-commands answer on stdout" do
    {out, err, status} = mix_shell("export A=1\n%state\nfalse\n")
    assert out =~ "A=1\n"
    assert err == ""
    assert status == 1
  end

  test "--timeout stops a runaway command and the next line still runs with the state intact" do
    {out, err, status} = mix_shell("x=kept\nsleep 20\necho \"$x\"\n", ["--timeout", "2000"])
    assert out == "kept\n"
    assert err =~ "ex_bashkit: "
    assert status == 0
  end

  test "--mount VFS=HOST:ro and :rw reach real host directories" do
    ro = HostDir.create!(%{"in.txt" => "from host\n"})
    rw = HostDir.create!()

    input =
      "cat /in/in.txt\necho out > /out/made.txt\necho nope > /in/x 2>/dev/null || echo refused\n"

    {out, _err, 0} = mix_shell(input, ["--mount", "/in=#{ro}:ro", "--mount", "/out=#{rw}:rw"])
    assert out == "from host\nrefused\n"
    assert File.read!(Path.join(rw, "made.txt")) == "out\n"
    refute File.exists?(Path.join(ro, "x"))
  end

  test "--file restores a keyed snapshot with --key or EX_BASHKIT_SNAPSHOT_KEY" do
    session = Session.new()
    {:ok, _} = Session.exec(session, "export SAVED=yes; cd /tmp; echo f > /tmp/f")
    {:ok, bytes} = Session.snapshot(session, key: "sekrit")
    file = tmp_path("snap")
    File.write!(file, bytes)

    script = "echo $SAVED $(pwd) $(cat f)\n"
    assert {"yes /tmp f\n", "", 0} = mix_shell(script, ["--file", file, "--key", "sekrit"])

    assert {"yes /tmp f\n", "", 0} =
             mix_shell(script, ["--file", file], [{"EX_BASHKIT_SNAPSHOT_KEY", "sekrit"}])

    {"", err, status} = mix_shell(script, ["--file", file, "--key", "wrong"])
    assert status != 0
    assert err =~ "--file"
  end

  test "--python registers python3" do
    assert {"3\n", _, 0} = mix_shell("python3 -c 'print(1 + 2)'\n", ["--python"])
    {_, _, status} = mix_shell("python3 -c 'print(1 + 2)'\n")
    assert status != 0
  end

  test "--git, --sqlite and --typescript grant the tools" do
    script = "git init -q /r && sqlite3 :memory: 'SELECT 2' && ts -c 'console.log(3)'\n"
    assert {"2\n3\n", _, 0} = mix_shell(script, ["--git", "--sqlite", "--typescript"])
    {_, _, status} = mix_shell(script)
    assert status != 0
  end

  test "--allow-net reaches the session's allowlist" do
    script = "curl -s http://127.0.0.1:9/other\n"
    {denied_out, denied_err, _} = mix_shell(script)
    {allowed_out, _, _} = mix_shell(script, ["--allow-net", "http://127.0.0.1:9/ok"])
    # Without the flag the host is outside the allowlist and reads as
    # unknown (the 404 principle); with it the host is allowed and only the
    # path is outside the prefix: a 404 that never reaches a server.
    assert denied_out <> denied_err =~ "Could not resolve host"
    assert allowed_out =~ "Not Found"
  end

  test "--credential PREFIX=ENV_VAR reads the token from the host, the shell never sees it" do
    token = "shell-5ecret-token"

    args = [
      "--allow-net",
      "https://api.example.com/",
      "--credential",
      "https://api.example.com/=EXB_TOKEN"
    ]

    {out, err, 0} = mix_shell("env; set; echo done\n", args, [{"EXB_TOKEN", token}])
    assert out =~ "done"
    refute out <> err =~ token

    assert Mix.ExBashkit.SessionFlags.credential!("https://a.example/=T", "ex_bashkit.shell", %{
             "T" => token
           }) ==
             {"https://a.example/", bearer: token}

    {_, err, status} = mix_shell("", args, [{"EXB_TOKEN", ""}])
    assert status != 0
    assert err =~ "EXB_TOKEN is not set"

    {_, err, status} =
      mix_shell("", ["--credential", "https://b.example/=EXB_TOKEN"], [{"EXB_TOKEN", token}])

    assert status != 0
    assert err =~ "not within :allow_net"
    refute err =~ token
  end

  test "bad options fail with a message" do
    {_, err, status} = mix_shell("", ["--mount", "nonsense"])
    assert status != 0
    assert err =~ "--mount takes VFS=HOST"

    {_, err, status} = mix_shell("", ["--credential", "nonsense"])
    assert status != 0
    assert err =~ "--credential takes PREFIX=ENV_VAR"

    {_, err, status} = mix_shell("", ["--bogus"])
    assert status != 0
    assert err =~ "invalid option --bogus"
  end

  test "output streams through the pipe as the script writes it" do
    sh = System.find_executable("sh")

    port =
      Port.open({:spawn_executable, sh}, [
        :binary,
        :exit_status,
        args: ["-c", "exec timeout 25 mix ex_bashkit.shell 2>/dev/null"],
        cd: @root,
        env: [{~c"MIX_ENV", ~c"test"}]
      ])

    Port.command(port, "echo first; sleep 3; echo second\n")
    # The first line arrives alone, while the command still sleeps.
    assert collect(port, "first\n", "") == "first\n"
    assert collect(port, "second\n", "") == "second\n"
    Port.command(port, "exit 7\n")
    assert_receive {^port, {:exit_status, 7}}, 15_000
  end

  defp collect(port, wanted, acc) do
    receive do
      {^port, {:data, data}} ->
        acc = acc <> data
        if String.contains?(acc, wanted), do: acc, else: collect(port, wanted, acc)
    after
      20_000 -> flunk("no #{inspect(wanted)} from the shell; got #{inspect(acc)}")
    end
  end
end
