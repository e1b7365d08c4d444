defmodule ExBashkit.Security.HostEnvironmentTest do
  # The environment of the host BEAM is never visible inside a sandbox: not
  # through env/printenv/set/declare/export/compgen, not through
  # /proc/self/environ, not in nested `bash -c`/`sh -c`, not in one-shot
  # execs. Only what `new/1`'s :env sets is there.
  use ExUnit.Case, async: true

  alias ExBashkit.{Result, Session}

  @probes [
    "env",
    "printenv",
    "set",
    "declare -p",
    "declare -x",
    "typeset -p",
    "export -p",
    "compgen -v",
    "compgen -e",
    "cat /proc/self/environ",
    "cat /proc/1/environ",
    "tr '\\0' '\\n' < /proc/self/environ",
    "bash -c env",
    "sh -c 'printenv; set'",
    "env -i env; env - printenv",
    "echo \"${!EXBASHKIT@}\" \"${!MIX@}\" \"${!BIN@}\" \"${!ROOT@}\""
  ]

  setup do
    name = "EXBASHKIT_SECRET_#{System.unique_integer([:positive])}"
    value = "hunter2-#{System.unique_integer([:positive])}-#{:rand.uniform(1_000_000_000)}"
    System.put_env(name, value)
    on_exit(fn -> System.delete_env(name) end)
    %{name: name, value: value}
  end

  defp output_of(runner, script) do
    case runner.(script) do
      {:ok, %Result{stdout: out, stderr: err}} -> out <> err
      {:error, message} -> message
    end
  end

  test "a variable set in the host BEAM is invisible to every probe, in a session", ctx do
    s = Session.new()

    for probe <- @probes ++ ["echo $#{ctx.name}", "printenv #{ctx.name}"] do
      out = output_of(&Session.exec(s, &1), probe)
      refute out =~ ctx.value, "#{probe} leaked the host value: #{out}"
      refute out =~ ctx.name, "#{probe} leaked the host variable's name: #{out}"
    end
  end

  test "... and in one-shot ExBashkit.exec/1", ctx do
    for probe <- @probes ++ ["echo $#{ctx.name}"] do
      out = output_of(&ExBashkit.exec/1, probe)
      refute out =~ ctx.value, "#{probe} leaked the host value: #{out}"
      refute out =~ ctx.name, "#{probe} leaked the host variable's name: #{out}"
    end
  end

  test "the BEAM's own environment (MIX_ENV, ROOTDIR, BINDIR, HOME, PATH) does not leak" do
    s = Session.new()
    {:ok, %Result{stdout: out}} = Session.exec(s, "env; set; declare -p; cat /proc/self/environ")

    for name <- ~w(MIX_ENV ROOTDIR BINDIR EMU PROGNAME RUST_BACKTRACE) do
      refute out =~ ~r/\b#{name}=/, "#{name} leaked: #{out}"
    end

    host_home = System.get_env("HOME")
    {:ok, %Result{stdout: home}} = Session.exec(s, "echo $HOME")
    assert home == "/home/sandbox\n"
    if host_home, do: refute(home == host_home <> "\n")

    # The host's PATH has the directories Elixir and cargo live in; the
    # sandbox has its own.
    {:ok, %Result{stdout: path}} = Session.exec(s, "echo $PATH")
    assert path == "/usr/local/bin:/usr/bin:/bin\n"
  end

  test "positive control: what :env sets is visible, so the probes can see variables", ctx do
    s = Session.new(env: [{ctx.name, "given-on-purpose"}])
    assert {:ok, %Result{stdout: out}} = Session.exec(s, "env; printenv #{ctx.name}")
    assert out =~ "#{ctx.name}=given-on-purpose"
    refute out =~ ctx.value
  end

  test "a variable the host sets after the session exists does not appear either", ctx do
    s = Session.new()
    late = ctx.name <> "_LATE"
    System.put_env(late, "late-" <> ctx.value)

    try do
      {:ok, %Result{stdout: out}} = Session.exec(s, "env; set")
      refute out =~ late
    after
      System.delete_env(late)
    end
  end
end
