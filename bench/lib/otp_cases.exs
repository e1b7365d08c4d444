defmodule Bench.OtpCases do
  @moduledoc false
  # The OTP layer: `ExBashkit.Pool`, `ExBashkit.Server` and its checkpoints
  # and migrations, against the bare API. BEAM-only (no raw counterpart).
  # Records are shaped like Bench.Cases' ({:sample, name, [ns]}, {:info, ..}).
  #
  #   pool        `echo hi` through Pool.exec/2 (a pooled session, reset after
  #               use) vs ExBashkit.exec/1 (a fresh interpreter) vs
  #               Session.exec/2 on a held session vs Server.exec/2.
  #   checkpoint  Server.exec/2 of `echo hi` with and without `checkpoint: true`,
  #               on an empty session and on one holding 1 MB of files.
  #   migrate     Server.migrate/2 of a session holding 1 MB of files to a
  #               `:peer` node on 127.0.0.1 and back (one sample per move).

  alias Bench.Sampler
  alias ExBashkit.{Pool, Server, Session}

  @echo "echo hi"
  @mb 1024 * 1024

  def groups, do: ~w(pool checkpoint migrate)

  defp sample(name, budget, quick?, fun) do
    {:sample, name,
     Sampler.isolated(fn -> Sampler.sample(Sampler.scale(budget, quick?), fun) end)}
  end

  defp ok!({:ok, %ExBashkit.Result{stdout: "hi\n"}}), do: :ok
  defp ok!(other), do: raise("unexpected: #{inspect(other, limit: 5)}")

  def run("pool", quick?) do
    {:ok, pool} = Pool.start_link(name: nil, size: 1)
    {:ok, server} = Server.start_link()
    session = Session.new()
    budget = {500, 1_000, 100_000, 1_500}

    [
      sample("ours/otp.pool_exec", budget, quick?, fn -> ok!(Pool.exec(pool, @echo)) end),
      sample("ours/otp.exec_once", budget, quick?, fn -> ok!(ExBashkit.exec(@echo)) end),
      sample("ours/otp.session_exec", budget, quick?, fn -> ok!(Session.exec(session, @echo)) end),
      sample("ours/otp.server_exec", budget, quick?, fn -> ok!(Server.exec(server, @echo)) end)
    ]
  end

  def run("checkpoint", quick?) do
    budget = {200, 500, 50_000, 1_500}
    big = {5, 30, 2_000, 1_500}
    {:ok, plain} = Server.start_link()
    {:ok, checkpointed} = Server.start_link(checkpoint: true)
    {:ok, plain_1mb} = Server.start_link(files: files_1mb())
    {:ok, checkpointed_1mb} = Server.start_link(files: files_1mb(), checkpoint: true)

    [
      sample("ours/otp.server_exec", budget, quick?, fn -> ok!(Server.exec(plain, @echo)) end),
      sample("ours/otp.server_exec.checkpoint", budget, quick?, fn ->
        ok!(Server.exec(checkpointed, @echo))
      end),
      sample("ours/otp.server_exec_1mb", big, quick?, fn -> ok!(Server.exec(plain_1mb, @echo)) end),
      sample("ours/otp.server_exec_1mb.checkpoint", big, quick?, fn ->
        ok!(Server.exec(checkpointed_1mb, @echo))
      end)
    ]
  end

  def run("migrate", quick?) do
    {peer, node} = start_peer()

    try do
      name = {:global, {__MODULE__, :migrate}}
      {:ok, _} = Server.start_link(name: name, files: files_1mb())
      {:ok, bytes} = Server.snapshot(name)
      # Odd moves go to the peer, even ones come back.
      moves = :atomics.new(1, [])

      move = fn ->
        target = if rem(:atomics.add_get(moves, 1, 1), 2) == 1, do: node, else: node()
        {:ok, pid} = Server.migrate(name, target)
        ^target = node(pid)
      end

      [
        {:info, "ours/otp.migrate_1mb.snapshot_bytes", Integer.to_string(byte_size(bytes))},
        sample("ours/otp.migrate_1mb", {2, 10, 200, 3_000}, quick?, move)
      ]
    after
      :peer.stop(peer)
    end
  end

  # 16 files of 64 KiB of random bytes (incompressible).
  defp files_1mb do
    for i <- 0..15, into: %{}, do: {"/state/f#{i}.bin", :rand.bytes(div(@mb, 16))}
  end

  defp start_peer do
    unless Node.alive?() do
      {_, 0} = System.cmd(System.find_executable("epmd"), ["-daemon"])

      {:ok, _} =
        :net_kernel.start([:"bench_#{System.unique_integer([:positive])}@127.0.0.1", :longnames])
    end

    args = Enum.flat_map(:code.get_path(), fn dir -> [~c"-pa", dir] end)

    {:ok, peer, node} =
      :peer.start(%{
        name: :peer.random_name(~c"bench"),
        host: ~c"127.0.0.1",
        longnames: true,
        args: args
      })

    {:ok, _} = :erpc.call(node, Application, :ensure_all_started, [:ex_bashkit])
    :ok = :global.sync()
    {peer, node}
  end
end
