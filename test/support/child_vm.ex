defmodule ExBashkit.Test.ChildVM do
  @moduledoc false
  # Run Elixir code in a separate BEAM (an OS process) that loads this
  # project's compiled code and NIF: for what a test must not do to its own VM
  # (halt it, or watch it die), and for tests that need a different network
  # namespace.
  #
  #     {output, exit_status} = ChildVM.run(~S"IO.puts(:hi)")
  #
  # A VM killed by a signal shows as exit status 128 + signal (139 = SIGSEGV,
  # 134 = SIGABRT).

  @doc """
  Run `code` with `elixir -e`. Options: `:netns` (run inside a fresh, empty
  network namespace: `unshare -n`), `:timeout` (ms, default 120 s; the child
  is killed and `{output, :timeout}` returned), `:env`.
  """
  def run(code, opts \\ []) do
    elixir = System.find_executable("elixir") || raise "elixir not on PATH"
    ebin = :code.lib_dir(:ex_bashkit) |> Path.join("ebin")
    args = ["-pa", ebin, "-e", code]

    {exe, args} =
      if opts[:netns] do
        {System.find_executable("unshare"), unshare_flags() ++ [elixir | args]}
      else
        {elixir, args}
      end

    task =
      Task.async(fn ->
        System.cmd(exe, args, stderr_to_stdout: true, env: Keyword.get(opts, :env, []))
      end)

    case Task.yield(task, Keyword.get(opts, :timeout, 120_000)) ||
           Task.shutdown(task, :brutal_kill) do
      {:ok, {output, status}} -> {output, status}
      _ -> {"", :timeout}
    end
  end

  # As root a plain network namespace; otherwise inside a user namespace.
  defp unshare_flags do
    if System.get_env("USER") == "root" or match?({"0\n", 0}, System.cmd("id", ["-u"])),
      do: ["-n"],
      else: ["-r", "-n"]
  end
end
