defmodule ExBashkit.Application do
  @moduledoc false
  # ExBashkit's supervision tree: the worker processes of
  # `isolation: :process` (`ExBashkit.WorkerPool`).

  use Application

  @impl true
  def start(_type, _args) do
    children = [ExBashkit.WorkerPool]
    Supervisor.start_link(children, strategy: :one_for_one, name: ExBashkit.Supervisor)
  end
end
