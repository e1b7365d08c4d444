defmodule ExBashkit.Session.StreamPump do
  @moduledoc false
  # The process that waits on a `stream/3` exec in the consumer's stead.
  #
  # An exec's back-calls (custom builtins, `virtual_fs`) are served by the
  # process that waits on it. For `stream/3` that used to be the consumer,
  # and a consumer busy with one element (or simply slow) pulls nothing, so
  # the script's builtins sat unserved and its deadline ran out. The pump
  # submits the exec, serves its back-calls and forwards output chunks and
  # the final outcome to the consumer as messages, whatever the consumer
  # does meanwhile.
  #
  # Lifetimes: the exec's caller is the pump (a dead pump cancels it); the
  # consumer's death cancels the exec through a small watcher process; the
  # pump ends once the exec is answered. The pump carries the consumer's
  # re-entrancy chain (`Callbacks.waiting_chain/0`), so a stream from inside
  # a builtin is refused on its own session as an exec would be.

  alias ExBashkit.Callbacks

  @typedoc "A running pump, as the consumer holds it."
  @type t :: %{pid: pid(), mref: reference(), tag: reference(), id: pos_integer()}

  @doc false
  # Start a pump that runs `submit` (returning `{:ok, ref, id}` or
  # `{:error, reason}`) and awaits it with `context_for.(id)`; `cancel.(id)`
  # stops the exec. Returns once the exec is submitted.
  @spec start(
          (() -> {:ok, reference(), pos_integer()} | {:error, term()}),
          (pos_integer() -> Callbacks.context()),
          (pos_integer() ->
             any())
        ) ::
          {:ok, t()} | {:error, term()}
  def start(submit, context_for, cancel) do
    owner = self()
    tag = make_ref()
    chain = Callbacks.waiting_chain()

    {pid, mref} = spawn_monitor(fn -> pump(owner, tag, chain, submit, context_for, cancel) end)

    receive do
      {^tag, :started, id} ->
        {:ok, %{pid: pid, mref: mref, tag: tag, id: id}}

      {^tag, :done, {:error, _} = error} ->
        Process.demonitor(mref, [:flush])
        error

      {:DOWN, ^mref, :process, ^pid, reason} ->
        {:error, "stream process exited: #{inspect(reason)}"}
    end
  end

  @doc false
  # The next event of the exec: an output chunk, or its final outcome.
  @spec next(t()) :: {:output, binary(), binary()} | {:done, term()}
  def next(%{pid: pid, mref: mref, tag: tag}) do
    receive do
      {^tag, :output, stdout, stderr} ->
        {:output, stdout, stderr}

      {^tag, :done, outcome} ->
        Process.demonitor(mref, [:flush])
        {:done, outcome}

      {:DOWN, ^mref, :process, ^pid, reason} ->
        {:done, {:error, "stream process exited: #{inspect(reason)}"}}
    end
  end

  @doc false
  # The consumer stopped early: cancel the exec and drop what is left of its
  # messages, returning its outcome.
  @spec halt(t(), (pos_integer() -> any())) :: term()
  def halt(%{id: id} = pump, cancel) do
    cancel.(id)
    drain(pump)
  end

  defp drain(pump) do
    case next(pump) do
      {:output, _, _} -> drain(pump)
      {:done, outcome} -> outcome
    end
  end

  defp pump(owner, tag, chain, submit, context_for, cancel) do
    Callbacks.put_waiting_chain(chain)

    case submit.() do
      {:ok, ref, id} ->
        send(owner, {tag, :started, id})
        watch(owner, self(), fn -> cancel.(id) end)
        forward = fn stdout, stderr -> send(owner, {tag, :output, stdout, stderr}) end
        send(owner, {tag, :done, Callbacks.await(ref, context_for.(id), forward)})

      {:error, _} = error ->
        send(owner, {tag, :done, error})
    end
  end

  # Cancel the exec if the consumer dies before the pump ends.
  defp watch(owner, pump, cancel) do
    spawn(fn ->
      owner_ref = Process.monitor(owner)
      pump_ref = Process.monitor(pump)

      receive do
        {:DOWN, ^owner_ref, :process, _, _} -> cancel.()
        {:DOWN, ^pump_ref, :process, _, _} -> :ok
      end
    end)
  end
end
