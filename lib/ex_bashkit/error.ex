defmodule ExBashkit.Error do
  @moduledoc """
  Why an exec (or another session call) failed, as data: the
  `{:error, error}` of the structured calls (`ExBashkit.Session.run/3`,
  `ExBashkit.run/2`, `ExBashkit.Server.run/3`, the replies of
  `ExBashkit.Session.exec_async/3`) and what every bang variant
  (`ExBashkit.Session.exec!/3`, `read_file!/2`, `stat!/2`, ...) raises.

  The seed's calls (`ExBashkit.Session.exec/3`, `read_file/2`, `stat/2`,
  ...) return `{:error, message}`: that is this struct's `:message`.

    * `:reason` - what to branch on (`reasons/0` lists them all):
      * `:timeout` - a deadline passed: the exec's `:timeout_ms` option
        (`limit: nil`), the session's `timeout_ms` limit
        (`limit: :timeout_ms`), or a lifecycle call's wait;
      * `:cancelled` - `ExBashkit.Session.cancel/1`, `cancel/2`, or the
        caller died;
      * `:limit` - a resource limit stopped the script; `:limit` names the
        `:limits` key of `ExBashkit.Session.new/1` that would let it finish
        (`nil` for bashkit's fixed guards, such as parser depth);
      * `:parse` - the script is not valid bash; nothing ran;
      * `:crashed` - the worker process running the call died during it;
      * `:lost` - the session's state was lost with its worker (the call
        after a crash of an idle session's worker);
      * `:not_found` - a filesystem call named a missing path (or
        `undelete/2` a path the trash does not hold);
      * `:exists` - a filesystem call would replace what is there;
      * `:permission_denied` - a read-only mount, a path escaping a
        mount, or another refusal of the filesystem;
      * `:not_supported` - the session lacks the capability the call
        needs (`trash/1` without `:soft_delete`);
      * `:overloaded` - `ExBashkit.Pool.exec!/3` found every session busy
        and its queue full;
      * `:internal` - anything else (refused calls, interpreter errors).
    * `:limit` - the `:limits` key for `reason: :limit` (and `:timeout_ms` for
      the session's deadline), else `nil`.
    * `:message` - a sentence for a person or a model, with a hint where one
      helps ("raise limits: [max_commands: ...]").
    * `:stdout`, `:stderr` - what the script wrote before it was stopped
      (each capped like a result's), `""` when nothing ran.
    * `:exit_code` - `nil`: a stopped script has no exit status.

  The reason is set where the failure happens (the interpreter, the
  filesystem, the worker's owner), never read back from the message.

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> {:error, error} = ExBashkit.Session.run(session, "echo partial; sleep 5", timeout_ms: 300)
      iex> {error.reason, error.stdout}
      {:timeout, "partial\\n"}
  """

  # The vocabulary, in one place (the Rust side's is `result/reason.rs`,
  # which a test keeps equal to this list).
  @reasons [
    :timeout,
    :cancelled,
    :limit,
    :parse,
    :crashed,
    :lost,
    :not_found,
    :exists,
    :permission_denied,
    :not_supported,
    :overloaded,
    :internal
  ]

  defexception message: "", reason: :internal, limit: nil, stdout: "", stderr: "", exit_code: nil

  @type reason ::
          :timeout
          | :cancelled
          | :limit
          | :parse
          | :crashed
          | :lost
          | :not_found
          | :exists
          | :permission_denied
          | :not_supported
          | :overloaded
          | :internal
  @type t :: %__MODULE__{
          message: String.t(),
          reason: reason(),
          limit: atom() | nil,
          stdout: binary(),
          stderr: binary(),
          exit_code: integer() | nil
        }

  @doc """
  Every `:reason` an error may carry.

  ## Examples

      iex> :not_found in ExBashkit.Error.reasons()
      true
  """
  @spec reasons() :: [reason()]
  def reasons, do: @reasons

  @doc """
  An error with `reason` and `message` (and no output).

  ## Examples

      iex> ExBashkit.Error.new(:not_found, "/x: no such file or directory").reason
      :not_found
  """
  @spec new(reason(), String.t()) :: t()
  def new(reason, message) when reason in @reasons and is_binary(message),
    do: %__MODULE__{reason: reason, message: message}

  @doc """
  The seed's form of a structured answer: `{:error, %ExBashkit.Error{}}`
  becomes `{:error, message}`; anything else is returned as it is.

  ## Examples

      iex> ExBashkit.Error.to_message({:error, ExBashkit.Error.new(:parse, "parse error")})
      {:error, "parse error"}

      iex> ExBashkit.Error.to_message({:ok, 1})
      {:ok, 1}
  """
  @spec to_message(term()) :: term()
  def to_message({:error, %__MODULE__{message: message}}), do: {:error, message}
  def to_message(other), do: other

  @doc false
  # The words of an error, whichever form it has.
  @spec text(t() | String.t()) :: String.t()
  def text(%__MODULE__{message: message}), do: message
  def text(message) when is_binary(message), do: message

  @doc false
  # The error of an exec answered in its stead, past its deadline
  # (`{:timeout, ms}`) or a cancel, because it did not stop by itself: by a
  # worker's owner, or in the node by its caller (the watchdog's words for
  # a cancel, `result.rs`, are the same). `output` is what it wrote so far.
  @spec stopped({:timeout, pos_integer()} | :cancelled, {binary(), binary()} | nil) :: t()
  def stopped(why, output) do
    {stdout, stderr} = output || {"", ""}
    %{stopped_error(why) | stdout: stdout, stderr: stderr}
  end

  defp stopped_error({:timeout, ms}),
    do:
      new(
        :timeout,
        "execution timed out after #{ms} ms (timeout_ms; the script did not stop by itself)"
      )

  defp stopped_error(:cancelled),
    do: new(:cancelled, "execution cancelled by cancel/1 (the script did not stop by itself)")

  @doc false
  # `{:error, %Error{}}` whatever the failure was given as: an error
  # already, `{reason, message}` from a caller that knows its reason, or a
  # bare message (a refusal with no reason of its own: `:internal`).
  @spec wrap({:error, t() | {reason(), String.t()} | String.t()}) :: {:error, t()}
  def wrap({:error, %__MODULE__{}} = error), do: error
  def wrap({:error, {reason, message}}), do: {:error, new(reason, message)}
  def wrap({:error, message}) when is_binary(message), do: {:error, new(:internal, message)}

  @doc false
  # `wrap/1` of an error, anything else as it is: the answers of the
  # structured calls.
  @spec structured(term()) :: term()
  def structured({:error, _} = error), do: wrap(error)
  def structured(other), do: other

  @doc false
  # The atoms of exec outcomes (`result.rs`) and `state/1`'s `:fs_usage`:
  # a worker's frames are decoded
  # with `[:safe]`, which needs every atom to exist already.
  @spec protocol_atoms() :: [atom()]
  def protocol_atoms do
    [__MODULE__, ExBashkit.Result, :__struct__, :__exception__, :reason, :limit, :message] ++
      [:stdout, :stderr, :exit_code, :stdout_truncated, :stderr_truncated, :changes] ++
      [:wall_time_us, :commands, :stdout_bytes, :stderr_bytes, :created, :modified] ++
      [:deleted, :complete, :max_commands] ++
      [:max_loop_iterations, :max_total_loop_iterations, :max_function_depth] ++
      [:timeout_ms, :max_input_bytes, :max_total_commands, :max_exec_calls, :fs_usage] ++
      [:bytes, :files, :dirs, :requests, :method, :url, :status, :decision, :allow, :deny] ++
      [:egress, :credentials, :prefix, :placeholder] ++ @reasons
  end
end
