defmodule ExBashkit.MCP.Protocol do
  @moduledoc """
  JSON-RPC 2.0 as MCP uses it: what a decoded message is, the shape of
  results and errors, the error codes, and protocol version negotiation.
  Pure functions; the transports and `ExBashkit.MCP.Session` call them.
  """

  # MCP names its protocol versions by the date of each revision of the
  # spec; these are names, not when anything here was measured. Newest
  # first: the first is what a client asking for a version we do not know
  # gets (the spec's rule for the initialize handshake).
  @versions ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]

  @codes %{
    parse_error: -32700,
    invalid_request: -32600,
    method_not_found: -32601,
    invalid_params: -32602,
    internal_error: -32603
  }

  @typedoc "A JSON-RPC id: a string or an integer."
  @type id :: String.t() | integer()

  @typedoc "What a decoded message is."
  @type message ::
          {:request, id(), String.t(), map()}
          | {:notification, String.t(), map()}
          | :response
          | {:invalid, id() | nil, String.t()}

  @typedoc "A JSON-RPC error kind."
  @type error_kind ::
          :parse_error | :invalid_request | :method_not_found | :invalid_params | :internal_error

  @doc """
  The protocol versions served, newest first.

  ## Examples

      iex> hd(ExBashkit.MCP.Protocol.versions())
      "2025-11-25"
  """
  @spec versions() :: [String.t()]
  def versions, do: @versions

  @doc """
  The version to answer an `initialize` that asks for `requested`: the same
  when served, else the newest.

  ## Examples

      iex> ExBashkit.MCP.Protocol.negotiate("2025-03-26")
      "2025-03-26"
      iex> ExBashkit.MCP.Protocol.negotiate("1999-01-01")
      "2025-11-25"
  """
  @spec negotiate(term()) :: String.t()
  def negotiate(requested) when requested in @versions, do: requested
  def negotiate(_requested), do: hd(@versions)

  @doc """
  Whether `version` has structured tool output (2025-06-18 on).

  ## Examples

      iex> ExBashkit.MCP.Protocol.structured_output?("2025-06-18")
      true
      iex> ExBashkit.MCP.Protocol.structured_output?("2025-03-26")
      false
  """
  @spec structured_output?(String.t() | nil) :: boolean()
  def structured_output?(version), do: version in ["2025-11-25", "2025-06-18"]

  @doc """
  What a decoded JSON value is as a JSON-RPC message. `params` is `%{}`
  when absent; a request or notification whose `params` is not an object,
  or a message that is none of the three, is `{:invalid, id, message}`.

  ## Examples

      iex> ExBashkit.MCP.Protocol.classify(%{"jsonrpc" => "2.0", "id" => 1, "method" => "ping"})
      {:request, 1, "ping", %{}}
      iex> ExBashkit.MCP.Protocol.classify(%{"jsonrpc" => "2.0", "method" => "notifications/initialized"})
      {:notification, "notifications/initialized", %{}}
      iex> ExBashkit.MCP.Protocol.classify([1])
      {:invalid, nil, "batches are not supported: send one message at a time"}
  """
  @spec classify(term()) :: message()
  def classify(%{"jsonrpc" => "2.0", "method" => method} = message) when is_binary(method) do
    case {Map.fetch(message, "id"), Map.get(message, "params", %{})} do
      {{:ok, id}, _params} when not (is_binary(id) or is_integer(id)) ->
        {:invalid, nil, "the id must be a string or an integer"}

      {{:ok, id}, params} when not is_map(params) ->
        {:invalid, id, "params must be an object"}

      {{:ok, id}, params} ->
        {:request, id, method, params}

      {:error, params} when is_map(params) ->
        {:notification, method, params}

      {:error, _params} ->
        {:invalid, nil, "params must be an object"}
    end
  end

  def classify(%{"jsonrpc" => "2.0", "id" => _} = message)
      when is_map_key(message, "result") or is_map_key(message, "error"),
      do: :response

  def classify(message) when is_list(message),
    do: {:invalid, nil, "batches are not supported: send one message at a time"}

  def classify(message) when is_map(message) do
    id = with id when is_binary(id) or is_integer(id) <- Map.get(message, "id"), do: id
    {:invalid, id, "not a JSON-RPC 2.0 request, notification or response"}
  end

  def classify(_message), do: {:invalid, nil, "a message must be a JSON object"}

  @doc """
  A success response.

  ## Examples

      iex> ExBashkit.MCP.Protocol.result(7, %{})
      %{"jsonrpc" => "2.0", "id" => 7, "result" => %{}}
  """
  @spec result(id(), map()) :: map()
  def result(id, result), do: %{"jsonrpc" => "2.0", "id" => id, "result" => result}

  @doc """
  An error response of `kind` (see `t:error_kind/0`); `id` is `nil` when
  the request's id could not be read.

  ## Examples

      iex> ExBashkit.MCP.Protocol.error(nil, :parse_error, "invalid JSON")
      %{"jsonrpc" => "2.0", "id" => nil, "error" => %{"code" => -32700, "message" => "invalid JSON"}}
  """
  @spec error(id() | nil, error_kind(), String.t()) :: map()
  def error(id, kind, message) do
    %{
      "jsonrpc" => "2.0",
      "id" => id,
      "error" => %{"code" => Map.fetch!(@codes, kind), "message" => message}
    }
  end
end
