defmodule ExBashkit.Callbacks do
  @moduledoc false
  # The Elixir side of the protocol between a running script and the process
  # that asked for it.
  #
  # A NIF never runs a script: it submits it to the library's interpreter
  # threads and returns. From then on the calling process waits in `await/1`
  # for messages tagged with the reference it created for this request:
  #
  #   {:ex_bashkit_reply, ref, {:ok, result_tuple} | {:error, message}}
  #       The final answer. Exactly one per request: the Rust side sends an
  #       error from a `Drop` guard if its task ends any other way.
  #
  # Messages for other references are left in the mailbox.

  alias ExBashkit.Result

  @doc false
  @spec await(reference()) :: {:ok, Result.t()} | {:error, String.t()}
  def await(ref) do
    receive do
      {:ex_bashkit_reply, ^ref, {:ok, native}} -> {:ok, Result.from_native(native)}
      {:ex_bashkit_reply, ^ref, {:error, message}} -> {:error, message}
    end
  end
end
