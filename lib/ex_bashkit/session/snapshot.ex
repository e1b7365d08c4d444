defmodule ExBashkit.Session.Snapshot do
  @moduledoc false
  # The machinery behind `ExBashkit.Session.snapshot/2` and `restore/3`:
  # option validation, submitting the job to the interpreter threads
  # (`native/ex_bashkit/src/session/snapshot.rs`) and awaiting its answer.
  #
  # Like `exec`, both wait for the session's interpreter lock on the Rust side
  # and answer with `{:ex_bashkit_reply, ref, outcome}`, so they run between
  # scripts, in arrival order, and hold no scheduler while they wait. Their
  # `:timeout_ms`, caller-death and re-entrancy rules are those of
  # `ExBashkit.Session.Lifecycle`.

  alias ExBashkit.Session.Lifecycle

  @doc false
  @spec take(ExBashkit.Session.t(), term()) :: {:ok, binary()} | {:error, String.t()}
  def take(session, opts) do
    {call, opts} = Lifecycle.split_options!(opts, "snapshot/2")
    request = snapshot_options!(opts)
    Lifecycle.run(session, :snapshot, [request], call, "snapshot/2")
  end

  @doc false
  @spec restore(ExBashkit.Session.t(), binary(), term()) :: :ok | {:error, String.t()}
  def restore(session, bytes, opts) when is_binary(bytes) do
    {call, opts} = Lifecycle.split_options!(opts, "restore/3")
    key = restore_options!(opts)
    Lifecycle.run(session, :restore, [bytes, key], call, "restore/3")
  end

  defp snapshot_options!(opts) do
    opts = keyword!(opts, "snapshot/2")

    Enum.reduce(opts, %{key: nil, exclude_filesystem: false, exclude_functions: false}, fn
      {:key, key}, acc ->
        %{acc | key: key!(key, "snapshot/2")}

      {flag, value}, acc when flag in [:exclude_filesystem, :exclude_functions] ->
        unless is_boolean(value) do
          raise ArgumentError,
                "snapshot/2 option #{inspect(flag)} must be a boolean, got: #{inspect(value)}"
        end

        Map.put(acc, flag, value)

      other, _acc ->
        raise ArgumentError, "unknown snapshot/2 option: #{inspect(other)}"
    end)
  end

  defp restore_options!(opts) do
    opts
    |> keyword!("restore/3")
    |> Enum.reduce(nil, fn
      {:key, key}, _acc -> key!(key, "restore/3")
      other, _acc -> raise ArgumentError, "unknown restore/3 option: #{inspect(other)}"
    end)
  end

  defp keyword!(opts, fun) do
    if is_list(opts) and Enum.all?(opts, &match?({key, _} when is_atom(key), &1)) do
      opts
    else
      raise ArgumentError, "#{fun} options must be a keyword list, got: #{inspect(opts)}"
    end
  end

  # An empty HMAC key is a key anyone can guess: refuse it rather than hand
  # out a forgeable "keyed" snapshot.
  defp key!(key, _fun) when is_binary(key) and byte_size(key) > 0, do: key

  defp key!(key, fun),
    do:
      raise(ArgumentError, "#{fun} option :key must be a non-empty binary, got: #{inspect(key)}")
end
