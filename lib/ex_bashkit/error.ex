defmodule ExBashkit.Error do
  @moduledoc """
  Why an exec (or another session call) failed, as an exception: what the
  bang variants (`ExBashkit.Session.exec!/3`, `read_file!/2`, ...) raise.

    * `:reason` - `:timeout`, `:cancelled`, `:limit`, `:parse`, `:crashed`
      (the worker process running the session died), `:lost` (the session's
      state was lost with its worker), `:not_found` (filesystem), or
      `:internal` for anything else;
    * `:message` - the text the non-bang function returned.

  ## Examples

      iex> ExBashkit.Error.from_message("execution timed out after 5 ms").reason
      :timeout
  """

  defexception [:message, reason: :internal]

  @type reason ::
          :timeout | :cancelled | :limit | :parse | :crashed | :lost | :not_found | :internal
  @type t :: %__MODULE__{message: String.t(), reason: reason()}

  @doc "The error for `message`, with its reason read from the text."
  @spec from_message(String.t()) :: t()
  def from_message(message) when is_binary(message) do
    %__MODULE__{message: message, reason: reason(message)}
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
