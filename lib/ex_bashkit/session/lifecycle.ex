defmodule ExBashkit.Session.Lifecycle do
  @moduledoc false
  # `state/2`, `reset/2`, `snapshot/2` and `restore/3` as calls with a
  # lifetime, like an exec (the Rust side is `native/ex_bashkit/src/session/lifecycle.rs`):
  #
  #   * a `:timeout_ms` (default `default_timeout_ms/0`) bounds the wait for
  #     the session's turn behind a running exec; past it the call answers
  #     a `:timeout` error and never runs;
  #   * the caller's death cancels a call still waiting (the NIF resource's
  #     monitor, or the worker owner's, as for an exec);
  #   * a call from a builtin or `virtual_fs` backend on the very session
  #     whose script it serves would wait for the lock its own caller holds:
  #     it is refused at once, like a re-entrant exec.
  #
  # One error model: `{:error, %ExBashkit.Error{}}` for run-time failures
  # (timeout, re-entrancy, a lost worker, a rejected snapshot; the public
  # calls give its message), `ArgumentError` for programmer errors (bad
  # options, not a session).

  alias ExBashkit.{Error, Request, Session}

  @default_timeout_ms 60_000
  @u64_max 0xFFFF_FFFF_FFFF_FFFF

  @typedoc "What the native side decodes (`OpCallOptions`)."
  @type call :: %{timeout_ms: pos_integer() | nil}

  @doc false
  # The wait for its turn a lifecycle call accepts unless told otherwise.
  @spec default_timeout_ms() :: pos_integer()
  def default_timeout_ms, do: @default_timeout_ms

  @doc false
  @spec state(Session.t(), term()) :: {:ok, map()} | {:error, Error.t()}
  def state(session, opts) do
    call = options!(opts, "state/1")
    run(session, :state, [], call, "state/1")
  end

  @doc false
  @spec reset(Session.t(), term()) :: :ok | {:error, Error.t()}
  def reset(session, opts) do
    call = options!(opts, "reset/1")
    run(session, :reset, [], call, "reset/1")
  end

  # Options of a call that takes only `:timeout_ms`.
  defp options!(opts, name) do
    case split_options!(opts, name) do
      {call, []} -> call
      {_call, [other | _]} -> raise ArgumentError, "unknown #{name} option: #{inspect(other)}"
    end
  end

  @doc false
  # Submit `op` with `args` and the call options, and wait for its answer.
  # Its error is an `%ExBashkit.Error{}`.
  @spec run(Session.t(), atom(), list(), call(), String.t()) :: term()
  def run(%Session{} = session, op, args, call, name),
    do: session |> Request.run(op, args ++ [call], name) |> Error.structured()

  def run(other, _op, _args, _call, name), do: Session.not_a_session!(other, name)

  @doc false
  # `{call, other_options}`: `:timeout_ms` taken out of `opts` (a keyword
  # list, as the snapshot options always were) and checked; the rest is
  # left to the caller.
  @spec split_options!(term(), String.t()) :: {call(), keyword()}
  def split_options!(opts, name) when is_list(opts) do
    unless Enum.all?(opts, &match?({key, _} when is_atom(key), &1)) do
      raise ArgumentError, "#{name} options must be a keyword list, got: #{inspect(opts)}"
    end

    {timeouts, rest} = Keyword.split(opts, [:timeout_ms])
    {%{timeout_ms: timeout!(Keyword.get(timeouts, :timeout_ms, :default), name)}, rest}
  end

  def split_options!(opts, name),
    do: raise(ArgumentError, "#{name} options must be a keyword list, got: #{inspect(opts)}")

  defp timeout!(:default, _name), do: @default_timeout_ms
  defp timeout!(:infinity, _name), do: nil
  defp timeout!(ms, _name) when is_integer(ms) and ms >= 1, do: min(ms, @u64_max)

  defp timeout!(other, name) do
    raise ArgumentError,
          "#{name} option :timeout_ms must be a positive integer or :infinity, got: #{inspect(other)}"
  end
end
