defmodule ExBashkit.Worker.SelfTest do
  @moduledoc """
  `ExBashkit.Worker.self_test/1`: real attempts, from inside an OS process
  confined as a session's worker would be, at what the confinement stops.

  The process is the worker executable started with the worker's own
  command line plus `--self-test` and the targets (see
  `native/ex_bashkit/src/worker/confine/self_test.rs`); it confines itself
  exactly as a worker does, makes each attempt with the plain system call,
  reports the outcomes in a frame and exits.
  """

  alias ExBashkit.{Worker, WorkerPool}
  alias ExBashkit.Session.Options
  alias ExBashkit.Worker.Grants

  @typedoc "`:ok` when the attempt worked, else the error it failed with."
  @type outcome :: :ok | {:denied, atom() | {:errno, integer()}}

  @typedoc "One outcome per attempt."
  @type report :: %{
          open_host_file: outcome(),
          open_host_dir: outcome(),
          read_mount: outcome(),
          write_mount: outcome(),
          connect_loopback: outcome(),
          exec_binary: outcome(),
          ptrace_parent: outcome()
        }

  @attempts ~w(open_host_file open_host_dir read_mount write_mount connect_loopback exec_binary ptrace_parent)a
  # Linux errno numbers the attempts meet.
  @errnos %{
    1 => :eperm,
    2 => :enoent,
    3 => :esrch,
    9 => :ebadf,
    13 => :eacces,
    17 => :eexist,
    20 => :enotdir,
    22 => :einval,
    30 => :erofs,
    38 => :enosys,
    95 => :eopnotsupp,
    97 => :eafnosupport,
    99 => :eaddrnotavail,
    101 => :enetunreach,
    111 => :econnrefused,
    113 => :ehostunreach
  }
  @wait_ms 10_000

  @doc "Run the attempts (see `ExBashkit.Worker.self_test/1`)."
  @spec run(keyword()) :: {:ok, report()} | {:error, String.t()}
  def run(opts \\ []) do
    mounts = Keyword.get(opts, :mounts, [])
    network? = Keyword.get(opts, :allow_net) not in [nil, []]
    {read_only, temporary} = read_only_mount(mounts)
    {:ok, listener} = :gen_tcp.listen(0, ip: {127, 0, 0, 1}, active: false)

    try do
      {:ok, port_number} = :inet.port(listener)
      {host_file, host_dir} = outside(mounts)
      without = Keyword.get(opts, :without, [])

      # Granted as a session with these mounts would be, the temporary
      # directory standing for a read-only mount included.
      grants =
        Grants.of_mounts(Options.parse!(mounts: mounts).native.mounts) ++
          if(temporary, do: [{temporary, false}], else: [])

      settings =
        Worker.settings(
          [network: network?, without: without, grants: grants] ++ WorkerPool.worker_options()
        )

      args =
        Worker.worker_args(settings) ++
          ["--self-test", "--probe-file", host_file, "--probe-dir", host_dir] ++
          ["--read-mount", first_mount(mounts, read_only), "--write-mount", read_only] ++
          ["--loopback-port", "#{port_number}", "--ptrace-pid", System.pid()]

      {port, _os_pid, _how} = ExBashkit.Worker.Zygote.start(args)
      collect(port, %{})
    after
      :gen_tcp.close(listener)
      if temporary, do: File.rm_rf(temporary)
    end
  end

  defp read_only_mount(mounts) do
    case Enum.find(mounts, &match?({_vfs, _host, :read_only}, &1)) do
      {_vfs, host, :read_only} ->
        {Path.expand(host), nil}

      nil ->
        dir =
          Path.join(
            System.tmp_dir!(),
            "ex_bashkit_self_test_#{System.unique_integer([:positive])}"
          )

        File.mkdir_p!(dir)
        {dir, dir}
    end
  end

  defp first_mount([{_vfs, host, _mode} | _], _read_only), do: Path.expand(host)
  defp first_mount(_none, read_only), do: read_only

  # A host file and directory no mount reaches: the worker executable and
  # its directory, unless a mount holds them, then /etc/passwd and /etc.
  defp outside(mounts) do
    hosts = for {_vfs, host, _mode} <- mounts, do: Path.expand(host)
    exe = Worker.executable()

    if Enum.any?(hosts, &String.starts_with?(exe, &1 <> "/")),
      do: {"/etc/passwd", "/etc"},
      else: {exe, Path.dirname(exe)}
  end

  defp collect(port, results) do
    receive do
      {^port, {:data, frame}} ->
        {:self_test, pairs} = :erlang.binary_to_term(frame, [:safe])
        collect(port, Enum.into(pairs, results, fn {name, result} -> {name, result} end))

      {^port, {:exit_status, _status}} ->
        report(results)
    after
      @wait_ms ->
        Port.close(port)
        {:error, "the self-test process did not finish in #{@wait_ms} ms"}
    end
  end

  defp report(results) when map_size(results) == 0,
    do: {:error, "the self-test process exited without a report"}

  defp report(results) do
    {:ok,
     Map.new(@attempts, fn attempt ->
       # Only a /bin/sh that ran leaves no outcome for `exec_binary`.
       {attempt, outcome(Map.get(results, Atom.to_string(attempt), 0))}
     end)}
  end

  defp outcome(0), do: :ok
  defp outcome(errno), do: {:denied, Map.get(@errnos, errno, {:errno, errno})}
end
