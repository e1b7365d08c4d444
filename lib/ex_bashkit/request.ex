defmodule ExBashkit.Request do
  @moduledoc false
  # A call on a session that is not an exec (lifecycle calls, history,
  # mounts, search, tar): refused at once when made from a back-call of the
  # session's own running script, else submitted to the interpreter
  # (`ExBashkit.Backend.submit/4`) and its answer awaited
  # (`ExBashkit.Callbacks`), serving `:virtual_fs` back-calls meanwhile
  # when given the session's callback context. One place for that order.

  alias ExBashkit.{Backend, Callbacks, Session}

  @doc false
  # The raw answer of `op` with `args` on `session`; `name` is the public
  # function, for the re-entrancy error.
  @spec run(Session.t(), atom(), list(), String.t(), Callbacks.context() | nil) :: term()
  def run(%Session{resource: resource, location: location}, op, args, name, context \\ nil) do
    with :ok <- Callbacks.not_reentrant(resource, name) do
      case Backend.submit(resource, location, op, args) do
        {:ok, ref} when context == nil -> Callbacks.await_reply(ref)
        {:ok, ref} -> Callbacks.await_reply(ref, context)
        {:done, reply} -> reply
        {:error, _} = error -> error
      end
    end
  end
end
