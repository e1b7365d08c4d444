defmodule ExBashkit.MCP.JSON do
  @moduledoc """
  JSON for the MCP server, through `serde_json` in the NIF
  (`native/ex_bashkit/src/term/json.rs`): no codec of our own.

  Decoding gives maps with string keys, lists, binaries, integers, floats,
  booleans and `nil`. Encoding takes those, atoms (as strings) and atom map
  keys. Both are bounded (a document of at most `max_bytes`, 128 levels of
  nesting) and run on a dirty scheduler; anything malformed or out of
  bounds is `{:error, message}`.
  """

  alias ExBashkit.Native

  # The NIF's own ceiling (`term/json.rs`, MAX_INPUT).
  @max_bytes 64 * 1024 * 1024

  @doc """
  Parse `json`, at most `max_bytes` long (default and ceiling 64 MiB).

  ## Examples

      iex> ExBashkit.MCP.JSON.decode(~s({"a": [1, 2.5, "x", null, true]}))
      {:ok, %{"a" => [1, 2.5, "x", nil, true]}}
      iex> {:error, "invalid JSON: " <> _} = ExBashkit.MCP.JSON.decode("{")
      iex> ExBashkit.MCP.JSON.decode("[1]", 2)
      {:error, "JSON input of 3 bytes is over the 2-byte limit"}
  """
  @spec decode(binary(), pos_integer()) :: {:ok, term()} | {:error, String.t()}
  def decode(json, max_bytes \\ @max_bytes)
      when is_binary(json) and is_integer(max_bytes) and max_bytes > 0 do
    limit = min(max_bytes, @max_bytes)

    if byte_size(json) > limit,
      do: {:error, "JSON input of #{byte_size(json)} bytes is over the #{limit}-byte limit"},
      else: Native.json_decode(json)
  end

  @doc """
  `term` as JSON text.

  ## Examples

      iex> ExBashkit.MCP.JSON.encode(%{"a" => [1, nil, true, "é"]})
      {:ok, ~s({"a":[1,null,true,"é"]})}
      iex> ExBashkit.MCP.JSON.encode(%{ok: :yes})
      {:ok, ~s({"ok":"yes"})}
      iex> {:error, _} = ExBashkit.MCP.JSON.encode({:not, :json})
  """
  @spec encode(term()) :: {:ok, binary()} | {:error, String.t()}
  def encode(term), do: Native.json_encode(term)

  @doc """
  `encode/1`'s text, raising `ArgumentError` when `term` is not JSON.
  """
  @spec encode!(term()) :: binary()
  def encode!(term) do
    case encode(term) do
      {:ok, json} -> json
      {:error, message} -> raise ArgumentError, message
    end
  end
end
