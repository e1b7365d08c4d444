defmodule ExBashkit.WorkerTest do
  # The worker OS process's own limits: `:worker_max_memory` reaches it as
  # the documented heap figure, its address-space limit is that plus its
  # thread stacks and mapping slack, and a limit it cannot apply (here: a
  # bad value) ends it at once instead of leaving it unconfined.
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.{Session, Worker}

  @stack_reservation 256 * 16 * 1024 * 1024
  @mapping_slack 1024 * 1024 * 1024

  # The process is forked by the zygote, so its command line is the
  # zygote's: the limit it applied is read from the kernel instead.
  test "max_memory_bytes reaches the process: its address space adds stacks and slack" do
    max_memory = 300 * 1024 * 1024

    session = Session.new(isolation: :process, limits: [max_memory_bytes: max_memory])

    os_pid = Session.info(session).os_pid

    limits = File.read!("/proc/#{os_pid}/limits")

    [soft, hard] =
      Regex.run(~r/^Max address space\s+(\d+)\s+(\d+)/m, limits, capture: :all_but_first)

    expected = max_memory + @stack_reservation + @mapping_slack
    assert {String.to_integer(soft), String.to_integer(hard)} == {expected, expected}
    # Held to here: a session's process stops with it.
    assert Session.info(session).os_pid == os_pid
  end

  test "a limit flag with a bad value ends the worker before it serves anything" do
    for args <- [["--max-memory", "lots"], ["--max-cpu-seconds", "0"], ["--max-memory"]] do
      {out, status} = System.cmd(Worker.executable(), args, stderr_to_stdout: true)
      assert status == 78, "#{inspect(args)}: #{out}"
      assert out =~ "ex_bashkit_worker: --max-"
    end
  end
end
