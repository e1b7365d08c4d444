defmodule ExBashkit.Egress do
  @moduledoc """
  A host's say on each request a script makes: the `:egress` option of
  `ExBashkit.Session.new/1`.

  The decider is a 1-arity function or `{module, arg}` for a module that
  implements this behaviour. It is called for every outbound request that
  `:allow_net` admitted (each redirect hop is a request of its own), with

      %{method: "GET", url: "https://api.example.com/v1/x", headers: [{name, value}]}

  the headers as they would go out, every value of a session credential
  replaced by `"[REDACTED]"`. It answers `:allow` or `:deny`. It runs in a
  process of its own, like a custom builtin, and must answer within the
  session's `:builtin_timeout_ms`: a crash, a timeout or any other answer
  denies. A denied request reads to the script as one outside `:allow_net`
  does (`404 Not Found`): nothing reaches the network.

  Whatever was decided, the exec's `ExBashkit.Result` lists the request in
  `:requests`.

      defmodule MyApp.ReadOnly do
        @behaviour ExBashkit.Egress
        @impl true
        def decide(%{method: method}, _arg), do: if(method in ["GET", "HEAD"], do: :allow, else: :deny)
      end

      ExBashkit.Session.new(allow_net: ["https://api.example.com/"], egress: {MyApp.ReadOnly, nil})
  """

  @typedoc "A request put to the decider."
  @type request :: %{
          method: String.t(),
          url: String.t(),
          headers: [{String.t(), String.t()}]
        }

  @typedoc "The `:egress` option."
  @type decider :: (request() -> :allow | :deny) | {module(), term()}

  @doc "Whether `request` may go out."
  @callback decide(request(), arg :: term()) :: :allow | :deny

  @doc false
  # The decider's answer to `request`: `:allow` only when it says so.
  @spec decide(decider(), request()) :: :allow | :deny
  def decide(fun, request) when is_function(fun, 1), do: answer(fun.(request))
  def decide({module, arg}, request), do: answer(module.decide(request, arg))

  defp answer(:allow), do: :allow
  defp answer(_other), do: :deny

  @doc false
  # The option's value checked: `nil`, a 1-arity function, or `{module, arg}`
  # whose module exports `decide/2`.
  @spec parse!(term()) :: decider() | nil
  def parse!(nil), do: nil
  def parse!(fun) when is_function(fun, 1), do: fun

  def parse!({module, _arg} = decider) when is_atom(module) do
    if Code.ensure_loaded?(module) and function_exported?(module, :decide, 2),
      do: decider,
      else: raise(ArgumentError, ":egress module #{inspect(module)} does not export decide/2")
  end

  def parse!(other),
    do:
      raise(
        ArgumentError,
        ":egress must be a 1-arity function or {module, arg}, got: #{inspect(other)}"
      )
end
