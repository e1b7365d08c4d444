defmodule Bench.BareNif do
  @moduledoc false
  # bashkit behind the thinnest NIF (bench/raw/src/lib.rs, built with the raw
  # harness by scripts/bench): an interpreter built by the NIF's settings and
  # `exec/2` polled inline on the caller's scheduler, with nothing of ours
  # around it. Timed beside `Session.exec/2` and `Session.new/0`, it is what
  # any NIF over bashkit pays in the VM (the floor table of the report).

  @on_load :load

  @doc "Path of the library, without its extension (as `:erlang.load_nif/2` takes it)."
  def path, do: Path.join(Path.dirname(Bench.Raw.binary()), "libex_bashkit_bare_nif")

  def available?, do: File.exists?(path() <> ".so")

  # Not built (a harness from before it existed): the module loads without
  # it, and the cases that need it report it unavailable.
  def load do
    if available?(), do: :erlang.load_nif(String.to_charlist(path()), 0), else: :ok
  end

  @doc "CPU nanoseconds this OS process has used, every thread's (bench/raw/src/cpu_clock.rs)."
  def process_cpu_ns, do: :erlang.nif_error(:not_loaded)

  @doc "A new interpreter, built during the call; dropped where its handle is collected."
  def new, do: :erlang.nif_error(:not_loaded)

  @doc "`{stdout, stderr, exit_code}` of `script`, run to completion in the call."
  def exec(_bash, _script), do: :erlang.nif_error(:not_loaded)

  @doc """
  `{:ok, {:done, id, {:ok, %ExBashkit.Result{}}}}` of `script`: `exec/2`
  taking and answering what the library's exec NIF does (bench/raw/src/lib.rs).
  """
  def shaped_exec(_bash, _script, _call, _pid, _ref), do: :erlang.nif_error(:not_loaded)

  # The call map `ExBashkit.Session.exec/3` makes when given no options.
  @no_options %{stdin: nil, stream: false, timeout_ms: nil, track_changes: false}

  @doc """
  `{:ok, %ExBashkit.Result{}}` of `script`, through `shaped_exec/5` as
  `ExBashkit.Session.exec/2` goes through its NIF, with no options: the
  floor of `Session.exec/2` for its arguments and answer.
  """
  def exec_shaped(bash, script) when is_binary(script) do
    case shaped_exec(bash, script, @no_options, self(), make_ref()) do
      {:ok, {:done, _id, outcome}} -> outcome
    end
  end

  @doc "A new interpreter whose builtin `answer` asks Elixir (`round_trip/3`)."
  def new_calling, do: :erlang.nif_error(:not_loaded)

  @doc "`{:done, {stdout, stderr, exit_code}}`, or `{:call, request}` while the script waits."
  def call_exec(_calling, _script), do: :erlang.nif_error(:not_loaded)

  @doc "Hand the answer to the waiting script: as `call_exec/2` answers."
  def call_resume(_calling, _answer), do: :erlang.nif_error(:not_loaded)

  @doc """
  `{stdout, stderr, exit_code}` of `script`, each back-call answered by
  `answer.(request)` (a binary, the command's stdout): in a fresh monitored
  process by default, as the library runs a builtin; in the caller with
  `in_caller: true`, to tell what that process costs.
  """
  def round_trip(calling, script, answer, opts \\ []) do
    serve(call_exec(calling, script), calling, answer, Keyword.get(opts, :in_caller, false))
  end

  defp serve({:done, result}, _calling, _answer, _in_caller), do: result

  defp serve({:call, request}, calling, answer, true) do
    serve(call_resume(calling, answer.(request)), calling, answer, true)
  end

  defp serve({:call, request}, calling, answer, false) do
    parent = self()
    {pid, ref} = spawn_monitor(fn -> send(parent, {:bare_answer, self(), answer.(request)}) end)

    receive do
      {:bare_answer, ^pid, stdout} ->
        Process.demonitor(ref, [:flush])
        serve(call_resume(calling, stdout), calling, answer, false)

      {:DOWN, ^ref, :process, _, reason} ->
        {"", "answer: #{inspect(reason)}\n", 1}
    end
  end
end
