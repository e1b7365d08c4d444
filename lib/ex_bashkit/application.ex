defmodule ExBashkit.Application do
  @moduledoc """
  The OTP application of ExBashkit: the processes the library itself needs.

    * `ExBashkit.WorkerPool` supervises the worker OS processes that run
      sessions with `isolation: :process` (the default).
    * `ExBashkit.Server.Checkpoints` owns the table where checkpointing
      servers keep their session (or its snapshot), so that it outlives a
      crashed server.
    * `ExBashkit.Server.Supervisor`, a `DynamicSupervisor`, holds the servers
      that `ExBashkit.Server.migrate/2` starts on this node.
    * The configured `ExBashkit.Store` (its table, directory or Mnesia
      copy) and `ExBashkit.Store.Collector`, which frees what no session's
      history keeps.

  Sessions and pools of your own belong in your supervision tree, not here.
  """

  use Application

  @impl true
  def start(_type, _args) do
    Supervisor.start_link(children(), strategy: :one_for_one, name: ExBashkit.Supervisor)
  end

  # The checkpoint store before the servers: they may read it in `init`.
  defp children do
    [
      ExBashkit.WorkerPool,
      ExBashkit.Server.Checkpoints,
      ExBashkit.Store,
      ExBashkit.Store.Collector,
      {DynamicSupervisor, name: ExBashkit.Server.Supervisor, strategy: :one_for_one}
    ]
  end
end
