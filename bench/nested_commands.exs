# The cost of running one of bashkit's commands in a nested interpreter
# (native/ex_bashkit/src/commands/nested.rs): `bunzip2 -c` (wrapped) against
# `bzcat` (bashkit's own, not wrapped) on the same small file, the same
# work but for the nested interpreter. Run: mix run bench/nested_commands.exs
alias ExBashkit.Session

n = 500
s = Session.new(limits: [max_commands: 1_000_000])
{:ok, _} = Session.exec(s, "echo hello > /s && bzip2 /s")

time = fn command ->
  script = "for i in $(seq #{n}); do #{command} /s.bz2 > /dev/null; done"
  {:ok, _} = Session.exec(s, script)

  {us, {:ok, %{exit_code: 0}}} = :timer.tc(fn -> Session.exec(s, script, timeout_ms: 120_000) end)
  us / n
end

for _ <- 1..3 do
  plain = time.("bzcat")
  nested = time.("bunzip2 -c")

  IO.puts(
    "bzcat #{Float.round(plain, 1)} us/call, bunzip2 -c (nested) #{Float.round(nested, 1)} us/call, " <>
      "overhead #{Float.round(nested - plain, 1)} us/call"
  )
end
