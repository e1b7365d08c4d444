# Two worker executables side by side in one BEAM instance, where figures
# swing too much between instances to compare runs (bench/DECISIONS.md,
# "Quick scripts on the frame reader"). A worker's executable is read when
# its OS process starts: session A is created on a worker started from
# OLD, session B on another started from NEW, then both are timed in turn.
#
# Run (two workers, the default on 2 cores), e.g. against a copy of the
# previous build:
#   MIX_ENV=prod mix run bench/worker_ab.exs OLD_EXECUTABLE NEW_EXECUTABLE
# It leaves NEW in place of priv/native/ex_bashkit_worker.
alias ExBashkit.Session

[old, new] = System.argv()
installed = ExBashkit.Worker.executable()
rounds = 8
calls = 5_000
scripts = ["echo hi", "answer"]

# Replace the executable by renaming over it: a running worker keeps the
# file it started from.
start_on = fn executable ->
  File.cp!(executable, installed <> ".ab")
  File.rename!(installed <> ".ab", installed)
  session = Session.new(isolation: :process, builtins: %{"answer" => fn _ -> {:ok, "42\n"} end})
  {:ok, %{stdout: "42\n"}} = Session.exec(session, "answer")
  session
end

a = start_on.(old)
b = start_on.(new)

{:process, worker_a, _} = a.location
{:process, worker_b, _} = b.location
if worker_a == worker_b, do: raise("both sessions landed on #{worker_a}: run with two workers")

median = fn session, script ->
  for _ <- 1..100, do: {:ok, _} = Session.exec(session, script)

  timed =
    for _ <- 1..calls do
      t0 = System.monotonic_time(:nanosecond)
      {:ok, _} = Session.exec(session, script)
      System.monotonic_time(:nanosecond) - t0
    end

  Enum.at(Enum.sort(timed), div(calls, 2)) / 1000
end

per_round =
  for _ <- 1..rounds do
    for {name, session} <- [old: a, new: b], script <- scripts, into: %{} do
      {{name, script}, median.(session, script)}
    end
  end

for script <- scripts do
  middle = fn name ->
    per_round |> Enum.map(& &1[{name, script}]) |> Enum.sort() |> Enum.at(div(rounds, 2))
  end

  IO.puts(
    "#{script}: old #{Float.round(middle.(:old), 1)} us, new #{Float.round(middle.(:new), 1)} us " <>
      "(median of #{rounds} rounds' medians of #{calls} calls)"
  )
end
