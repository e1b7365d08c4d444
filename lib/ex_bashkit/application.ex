defmodule ExBashkit.Application do
  @moduledoc """
  The OTP application of ExBashkit: the processes the library itself needs.

    * `ExBashkit.Image.Mapped` keeps the files worker OS processes map
      base images from (one per image, shared by all of them).
    * `ExBashkit.Worker.Zygote` owns the OS process that forks each worker
      OS process (sharing its pages), before any is needed.
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

  # The image files before the workers, which map them (and after them,
  # in stopping order); the checkpoint store before the servers: they may
  # read it in `init`.
  defp children do
    [
      ExBashkit.Image.Mapped,
      ExBashkit.Worker.Zygote,
      ExBashkit.WorkerPool,
      ExBashkit.Server.Checkpoints,
      ExBashkit.Store,
      ExBashkit.Store.Collector,
      {DynamicSupervisor, name: ExBashkit.Server.Supervisor, strategy: :one_for_one}
    ]
  end
end
