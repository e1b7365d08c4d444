defmodule ExBashkit.PoolTest do
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.{Pool, Result, Session}

  doctest ExBashkit.Pool

  @long_limits [
    max_loop_iterations: 1_000_000_000,
    max_commands: 1_000_000_000,
    timeout_ms: 600_000
  ]

  defp pool!(opts) do
    start_supervised!({Pool, Keyword.put_new(opts, :name, nil)}, id: make_ref())
  end

  # A process holding one slot (a checked-out session) until told to let go.
  defp hold(pool) do
    test = self()

    pid =
      spawn(fn ->
        Pool.checkout(pool, fn _session ->
          send(test, {:holding, self()})

          receive do
            :release -> :ok
          after
            20_000 -> :ok
          end
        end)

        send(test, {:released, self()})
      end)

    assert_receive {:holding, ^pid}, 5_000
    pid
  end

  describe "exec/3" do
    test "a session goes back to its built state before the next caller" do
      pool = pool!(size: 1, session: [env: [BASE: "b"], cwd: "/home", files: %{"/seed" => "s"}])

      leaky = """
      export BASE=changed LEAK=1
      cd /tmp
      echo secret > /home/secret.txt
      rm /seed
      leak() { :; }
      alias l=ls
      """

      assert {:ok, _} = Pool.exec(pool, leaky)

      probe =
        ~S[echo "$BASE|$LEAK|$(pwd)|$(cat /seed)|$(test -e /home/secret.txt && echo leak)|$(declare -F leak)|$(alias)"]

      assert {:ok, %Result{stdout: "b||/home|s|||\n"}} = Pool.exec(pool, probe)
      assert Pool.stats(pool).idle == 1
    end

    test "checkout/2 returns fun's value, and the session is reset even when fun raises" do
      pool = pool!(size: 1)

      assert_raise RuntimeError, fn ->
        Pool.checkout(pool, fn session ->
          {:ok, _} = Session.exec(session, "export X=1")
          raise "boom"
        end)
      end

      assert {:ok, %Result{stdout: "[]\n"}} =
               Pool.checkout(pool, fn s -> Session.exec(s, "echo [$X]") end)

      assert Pool.checkout(pool, fn _ -> :value end) == :value
    end

    test "{:error, :overloaded} at once past max_queue; waiting callers are served in turn" do
      pool = pool!(size: 1, max_queue: 1)
      holder = hold(pool)
      test = self()

      {waiter, waiter_ref} =
        spawn_monitor(fn -> send(test, {:waited, Pool.exec(pool, "echo served")}) end)

      eventually(fn -> Pool.stats(pool).waiting == 1 end)

      assert Pool.exec(pool, "echo no") == {:error, :overloaded}
      assert Pool.run(pool, fn -> :no end) == {:error, :overloaded}

      send(holder, :release)
      assert_receive {:waited, {:ok, %Result{stdout: "served\n"}}}, 5_000
      assert_receive {:released, ^holder}, 5_000
      assert_receive {:DOWN, ^waiter_ref, :process, ^waiter, :normal}, 5_000
      assert %{busy: 0, waiting: 0} = Pool.stats(pool)
    end

    test "a caller killed mid-exec frees its session: the script is cancelled" do
      pool = pool!(size: 1, session: [limits: @long_limits])
      test = self()

      caller =
        spawn(fn ->
          Pool.exec(pool, "echo started; while true; do :; done", stream_to: test)
        end)

      assert_receive {:ex_bashkit_output, {:stdout, "started\n"}}, 5_000
      Process.exit(caller, :kill)

      # Without the cancel, the only session would stay busy for 10 minutes.
      assert {:ok, %Result{stdout: "next\n"}} = Pool.exec(pool, "echo next")
      assert %{busy: 0, idle: 1} = Pool.stats(pool)
    end

    test "a waiting caller that dies leaves the queue" do
      pool = pool!(size: 1, max_queue: 1)
      holder = hold(pool)
      waiter = spawn(fn -> Pool.exec(pool, "true") end)
      eventually(fn -> Pool.stats(pool).waiting == 1 end)
      Process.exit(waiter, :kill)
      eventually(fn -> Pool.stats(pool).waiting == 0 end)
      send(holder, :release)
      assert_receive {:released, ^holder}, 5_000
    end

    test "a nested request from a slot holder raises instead of waiting for itself" do
      pool = pool!(size: 2)

      assert_raise RuntimeError, ~r/already holds a slot/, fn ->
        Pool.checkout(pool, fn _ -> Pool.exec(pool, "true") end)
      end

      assert %{busy: 0} = Pool.stats(pool)
    end
  end

  describe "idle TTL" do
    test "idle sessions are dropped after idle_ttl_ms and rebuilt on demand" do
      # Long enough that building both sessions (the TTL counts from the
      # pool's start) and the first reads come well within it.
      pool = pool!(size: 2, idle_ttl_ms: 3_000)
      assert Pool.stats(pool).idle == 2
      eventually(fn -> Pool.stats(pool).idle == 0 end)

      assert {:ok, %Result{stdout: "rebuilt\n"}} = Pool.exec(pool, "echo rebuilt")
      assert Pool.stats(pool).idle == 1
      eventually(fn -> Pool.stats(pool).idle == 0 end)
    end

    test "without a TTL, idle sessions stay" do
      pool = pool!(size: 2)
      assert {:ok, _} = Pool.exec(pool, "true")
      assert %{idle: 2} = Pool.stats(pool)
    end
  end

  describe "run/2 permits" do
    test "at most size funs run at once" do
      pool = pool!(size: 2, max_queue: 100)
      counter = :atomics.new(2, [])

      tasks =
        for _ <- 1..20 do
          Task.async(fn ->
            Pool.run(pool, fn ->
              now = :atomics.add_get(counter, 1, 1)
              max = :atomics.get(counter, 2)
              if now > max, do: :atomics.compare_exchange(counter, 2, max, now)
              Process.sleep(5)
              :atomics.sub(counter, 1, 1)
              :ran
            end)
          end)
        end

      assert Enum.map(tasks, &Task.await(&1, 10_000)) == List.duplicate(:ran, 20)
      assert :atomics.get(counter, 2) in 1..2
    end

    test "waiting funs run first come, first served" do
      pool = pool!(size: 1, max_queue: 10)
      holder = hold(pool)
      test = self()

      for i <- 1..4 do
        spawn(fn -> Pool.run(pool, fn -> send(test, {:ran, i}) end) end)
        eventually(fn -> Pool.stats(pool).waiting == i end)
      end

      send(holder, :release)
      for i <- 1..4, do: assert_receive({:ran, ^i}, 5_000)
      refute_received {:ran, _}
    end

    test "a permit is freed when its holder dies" do
      pool = pool!(size: 1)
      test = self()

      holder =
        spawn(fn ->
          Pool.run(pool, fn ->
            send(test, :in_run)
            Process.sleep(:infinity)
          end)
        end)

      assert_receive :in_run, 5_000
      assert Pool.stats(pool).busy == 1
      Process.exit(holder, :kill)
      assert Pool.run(pool, fn -> :mine end) == :mine
    end

    test "session_exec/3 runs on the caller's own session under a permit" do
      pool = pool!(size: 1)
      session = Session.new()
      assert {:ok, _} = Pool.session_exec(pool, session, "export KEEP=1")
      assert {:ok, %Result{stdout: "1\n"}} = Pool.session_exec(pool, session, "echo $KEEP")
    end
  end

  test "malformed options raise ArgumentError in the caller" do
    assert_raise ArgumentError, fn -> Pool.start_link(name: nil, size: 0) end
    assert_raise ArgumentError, fn -> Pool.start_link(name: nil, max_queue: -1) end
    assert_raise ArgumentError, fn -> Pool.start_link(name: nil, idle_ttl_ms: 0) end
    assert_raise ArgumentError, fn -> Pool.start_link(name: nil, session: [cwd: 1]) end
    assert_raise ArgumentError, fn -> Pool.start_link(name: nil, sizes: 1) end
  end
end

defmodule ExBashkit.PoolDefaultsTest do
  # The default name and the application environment are global.
  use ExUnit.Case, async: false

  alias ExBashkit.{Pool, Result, Session}

  setup do
    Application.put_env(:ex_bashkit, :pool_size, 3)
    on_exit(fn -> Application.delete_env(:ex_bashkit, :pool_size) end)
  end

  test "code written for the other package's ExBashkit.Pool runs unchanged" do
    start_supervised!(ExBashkit.Pool)

    assert Pool.stats(ExBashkit.Pool).size == 3
    assert Pool.run(fn -> :value end) == :value
    assert {:ok, %Result{stdout: "hi\n"}} = Pool.exec("echo hi")
    assert {:ok, %Result{stdout: "hi\n"}} = Pool.exec(ExBashkit.Pool, "echo hi")

    session = Session.new()
    assert {:ok, _} = Pool.session_exec(session, "x=1")
    assert {:ok, %Result{stdout: "1\n"}} = Pool.session_exec(ExBashkit.Pool, session, "echo $x")
  end
end
