defmodule ExBashkit.Error do
  @moduledoc """
  Why an exec (or another session call) failed: the `{:error, error}` of
  `ExBashkit.Session.exec/3`, `ExBashkit.exec/2`, the final event of
  `ExBashkit.Session.stream/3`, and what the bang variants
  (`ExBashkit.Session.exec!/3`, `read_file!/2`, ...) raise.

    * `:reason` - what to branch on:
      * `:timeout` - a deadline passed: the exec's `:timeout_ms` option
        (`limit: nil`) or the session's `timeout_ms` limit
        (`limit: :timeout_ms`);
      * `:cancelled` - `ExBashkit.Session.cancel/1`, `cancel/2`, or the
        caller died;
      * `:limit` - a resource limit stopped the script; `:limit` names the
        `:limits` key of `ExBashkit.Session.new/1` that would let it finish
        (`nil` for bashkit's fixed guards, such as parser depth);
      * `:parse` - the script is not valid bash; nothing ran;
      * `:crashed` - the worker process running the session died;
      * `:lost` - the session's state was lost with its worker;
      * `:not_found` - a filesystem call named a missing path;
      * `:internal` - anything else (refused calls, interpreter errors).
    * `:limit` - the `:limits` key for `reason: :limit` (and `:timeout_ms` for
      the session's deadline), else `nil`.
    * `:message` - a sentence for a person or a model, with a hint where one
      helps ("raise limits: [max_commands: ...]").
    * `:stdout`, `:stderr` - what the script wrote before it was stopped
      (each capped like a result's), `""` when nothing ran.
    * `:exit_code` - `nil`: a stopped script has no exit status.

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> {:error, error} = ExBashkit.Session.exec(session, "echo partial; sleep 5", timeout_ms: 300)
      iex> {error.reason, error.stdout}
      {:timeout, "partial\\n"}

      iex> ExBashkit.Error.from_message("execution timed out after 5 ms").reason
      :timeout
  """

  defexception message: "", reason: :internal, limit: nil, stdout: "", stderr: "", exit_code: nil

  @type reason ::
          :timeout | :cancelled | :limit | :parse | :crashed | :lost | :not_found | :internal
  @type t :: %__MODULE__{
          message: String.t(),
          reason: reason(),
          limit: atom() | nil,
          stdout: binary(),
          stderr: binary(),
          exit_code: integer() | nil
        }

  @doc """
  The error for `message`, with its reason read from the text: for failures
  that only have words (a worker that died, a refused call).
  """
  @spec from_message(String.t()) :: t()
  def from_message(message) when is_binary(message) do
    %__MODULE__{message: message, reason: reason(message)}
  end

  @doc false
  # The error of an exec answered in its stead, past its deadline
  # (`{:timeout, ms}`) or a cancel, because it did not stop by itself: by a
  # worker's owner, or in the node by its caller (the watchdog's words for
  # a cancel, `result.rs`, are the same). `output` is what it wrote so far.
  @spec stopped({:timeout, pos_integer()} | :cancelled, {binary(), binary()} | nil) :: t()
  def stopped(why, output) do
    {stdout, stderr} = output || {"", ""}
    %{from_message(stopped_message(why)) | stdout: stdout, stderr: stderr}
  end

  defp stopped_message({:timeout, ms}),
    do: "execution timed out after #{ms} ms (timeout_ms; the script did not stop by itself)"

  defp stopped_message(:cancelled),
    do: "execution cancelled by cancel/1 (the script did not stop by itself)"

  @doc false
  # `{:error, %Error{}}` whatever the failure was given as (a message from
  # an older path, or an error already).
  @spec wrap({:error, t() | String.t()}) :: {:error, t()}
  def wrap({:error, %__MODULE__{}} = error), do: error
  def wrap({:error, message}) when is_binary(message), do: {:error, from_message(message)}

  @doc false
  # The atoms of exec outcomes (`result.rs`) and `state/1`'s `:fs_usage`:
  # a worker's frames are decoded
  # with `[:safe]`, which needs every atom to exist already.
  @spec protocol_atoms() :: [atom()]
  def protocol_atoms do
    [__MODULE__, ExBashkit.Result, :__struct__, :__exception__, :reason, :limit, :message] ++
      [:stdout, :stderr, :exit_code, :stdout_truncated, :stderr_truncated, :changes] ++
      [:wall_time_us, :commands, :stdout_bytes, :stderr_bytes, :created, :modified] ++
      [:deleted, :complete, :timeout, :cancelled, :parse, :internal, :max_commands] ++
      [:max_loop_iterations, :max_total_loop_iterations, :max_function_depth] ++
      [:timeout_ms, :max_input_bytes, :max_total_commands, :max_exec_calls, :fs_usage] ++
      [:bytes, :files, :dirs, :requests, :method, :url, :status, :decision, :allow, :deny] ++
      [:egress, :credentials, :prefix, :placeholder]
  end

  defp reason(message) do
    cond do
      message =~ "timed out" or message =~ "timeout" -> :timeout
      message =~ "cancelled" -> :cancelled
      message =~ "parse error" -> :parse
      message =~ "limit exceeded" -> :limit
      message =~ "worker process crashed" -> :crashed
      message =~ "session lost" -> :lost
      message =~ "No such file" or message =~ "not found" -> :not_found
      true -> :internal
    end
  end
end
