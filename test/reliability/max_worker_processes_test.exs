defmodule ExBashkit.Reliability.MaxWorkerProcessesTest do
  # `config :ex_bashkit, max_worker_processes:` bounds the groups' own
  # worker processes; past it `new/1` raises, never seating the session
  # beside another group. Not async: it lowers a node-wide setting.
  use ExUnit.Case, async: false

  alias ExBashkit.Session

  @moduletag :process_only

  test "a session past max_worker_processes is refused, saying so; below it, it starts" do
    held = Session.new(group: :held_group)
    active = ExBashkit.WorkerPool.process_count()
    previous = Application.get_env(:ex_bashkit, :max_worker_processes)
    Application.put_env(:ex_bashkit, :max_worker_processes, active)

    try do
      error = assert_raise ArgumentError, fn -> Session.new(group: :one_too_many) end
      assert error.message =~ "max_worker_processes (#{active}) reached"
      assert_raise ArgumentError, ~r/max_worker_processes/, fn -> Session.new() end
      # A session of a group that has its process already still fits.
      assert %{group: :held_group} = Session.info(Session.new(group: :held_group))
    after
      if previous,
        do: Application.put_env(:ex_bashkit, :max_worker_processes, previous),
        else: Application.delete_env(:ex_bashkit, :max_worker_processes)
    end

    assert {:ok, %{stdout: "fits\n"}} =
             Session.exec(Session.new(group: :one_too_many), "echo fits")

    assert Session.info(held).group == :held_group
  end
end
