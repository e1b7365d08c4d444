# A persistent session at work: what an AI agent's shell tool does with
# ExBashkit. Run with `scripts/example` (or `mix run examples/session_tour.exs`).
alias ExBashkit.Session

say = fn title -> IO.puts("\n== " <> title) end

show = fn session, script ->
  IO.puts("$ " <> script)

  case Session.run(session, script) do
    {:ok, result} ->
      IO.write(result.stdout)
      if result.stderr != "", do: IO.write("[stderr] " <> result.stderr)
      if result.exit_code != 0, do: IO.puts("[exit #{result.exit_code}]")

    {:error, %ExBashkit.Error{} = error} ->
      IO.puts("[error #{error.reason}] " <> error.message)
  end
end

# A session with some input files, an environment, and one capability the
# host grants on purpose: a key/value lookup served by Elixir.
store = %{"answer" => "42", "city" => "Lisbon"}

session =
  Session.new(
    env: [PROJECT: "demo"],
    cwd: "/work",
    files: %{"/work/data/sales.csv" => "region,amount\nnorth,10\nsouth,25\nnorth,7\n"},
    builtins: %{
      "kv_get" => fn call ->
        case Map.fetch(store, hd(call.args)) do
          {:ok, value} -> {:ok, value <> "\n"}
          :error -> {:error, "no such key\n"}
        end
      end
    },
    limits: [timeout_ms: 5_000]
  )

IO.puts("Session: " <> inspect(session))

say.("State carries across calls: variables, functions, cwd, files")

show.(
  session,
  "export TOTAL=0; summarize() { awk -F, 'NR>1 {s[$1]+=$2} END {for (r in s) print r, s[r]}' \"$1\" | sort; }"
)

show.(session, "summarize data/sales.csv | tee report.txt")
show.(session, "cd data && pwd && ls")
show.(session, "echo \"project $PROJECT, report has $(wc -l < ../report.txt) lines\"")

say.("The host reads what the script produced, without a script")
IO.inspect(Session.read_file(session, "/work/report.txt"), label: "read_file")
IO.inspect(Session.stat(session, "/work/report.txt"), label: "stat")

say.("A capability granted by the host: a builtin implemented in Elixir")
show.(session, "answer=$(kv_get answer); echo \"the answer is $answer\"; kv_get nope")

say.("Nothing of the host is reachable")
show.(session, "cat /etc/passwd | head -3; curl -s https://example.com; echo \"curl exit $?\"")

say.("Mistakes and runaway scripts are contained")
show.(session, "if then")
show.(session, "f() { f; }; f")
show.(session, "echo still here, in $(pwd)")

say.("Streaming output while the script runs")

session
|> Session.stream("for i in 1 2 3; do echo tick $i; sleep 0.2; done")
|> Enum.each(&IO.inspect(&1, label: "chunk"))

say.("Which files did a command touch?")
{:ok, result} = Session.exec(session, "echo hi > new.txt; rm ../report.txt", track_changes: true)
IO.inspect(result.changes, label: "changes")

say.("State, then back to the start")

IO.inspect(Session.state!(session) |> Map.take([:cwd, :functions, :last_exit_code]),
  label: "state"
)

:ok = Session.reset(session)
show.(session, "pwd; ls /work; type summarize 2>&1 | head -1")
