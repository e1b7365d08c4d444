defmodule ExBashkit.MCP.HTTP.Wire do
  @moduledoc """
  HTTP/1.1 on a `:gen_tcp` socket, as much as the Streamable HTTP
  transport needs: a request read with OTP's own parser
  (`:erlang.decode_packet/3`) and a `Content-Length` body, bounded; a
  response with a body, or a chunked `text/event-stream` one event at a
  time.

  A request is read from a buffer that keeps what the client sent past
  it, so keep-alive and pipelined requests are read in turn.
  """

  @max_head_bytes 64 * 1024
  @max_headers 100

  @typedoc "A request read: method, path (no query), lower-case header names."
  @type request :: %{
          method: String.t(),
          path: String.t(),
          version: {non_neg_integer(), non_neg_integer()},
          headers: %{String.t() => String.t()},
          body: binary()
        }

  @doc """
  Read one request from `socket` after `buffer` (bytes already received).
  `{:ok, request, rest}`, `:closed` (the client closed or sent nothing in
  `timeout` ms before a request began), or `{:error, status, message}` for
  a request that cannot be served (its body is not read then).
  """
  @spec read(:gen_tcp.socket(), binary(), pos_integer(), timeout()) ::
          {:ok, request(), binary()} | :closed | {:error, 400..599, String.t()}
  def read(socket, buffer, max_body, timeout) do
    with {:ok, {method, path, version}, rest} <- request_line(socket, buffer, timeout),
         {:ok, headers, rest} <- headers(socket, rest, %{}, 0, timeout),
         {:ok, length} <- content_length(headers, max_body),
         {:ok, body, rest} <- body(socket, rest, length, timeout) do
      {:ok, %{method: method, path: path, version: version, headers: headers, body: body}, rest}
    end
  end

  # Blank lines before a request line are skipped, as RFC 9112 allows.
  defp request_line(socket, "\r\n" <> rest, timeout), do: request_line(socket, rest, timeout)
  defp request_line(socket, "\n" <> rest, timeout), do: request_line(socket, rest, timeout)

  defp request_line(socket, buffer, timeout) do
    case :erlang.decode_packet(:http_bin, buffer, []) do
      {:ok, {:http_request, method, {:abs_path, target}, version}, rest} ->
        [path | _query] = String.split(target, "?", parts: 2)
        {:ok, {to_string(method), path, version}, rest}

      {:ok, {:http_request, _method, _target, _version}, _rest} ->
        {:error, 400, "the request target must be a path"}

      {:ok, _other, _rest} ->
        {:error, 400, "malformed request line"}

      {:more, _} when byte_size(buffer) > @max_head_bytes ->
        {:error, 431, "request line too long"}

      {:more, _} ->
        with {:ok, more} <- recv(socket, timeout, buffer == ""),
             do: request_line(socket, buffer <> more, timeout)

      {:error, _} ->
        {:error, 400, "malformed request line"}
    end
  end

  defp headers(_socket, _buffer, _acc, count, _timeout) when count > @max_headers,
    do: {:error, 431, "too many headers"}

  defp headers(socket, buffer, acc, count, timeout) do
    case :erlang.decode_packet(:httph_bin, buffer, []) do
      {:ok, {:http_header, _, name, _, value}, rest} ->
        name = name |> to_string() |> String.downcase()
        value = if old = acc[name], do: old <> ", " <> value, else: value
        headers(socket, rest, Map.put(acc, name, value), count + 1, timeout)

      {:ok, :http_eoh, rest} ->
        {:ok, acc, rest}

      {:more, _} when byte_size(buffer) > @max_head_bytes ->
        {:error, 431, "request headers too large"}

      {:more, _} ->
        with {:ok, more} <- recv(socket, timeout, false),
             do: headers(socket, buffer <> more, acc, count, timeout)

      _malformed ->
        {:error, 400, "malformed header"}
    end
  end

  defp content_length(%{"transfer-encoding" => _}, _max),
    do: {:error, 411, "chunked request bodies are not accepted: send Content-Length"}

  defp content_length(headers, max) do
    case Integer.parse(Map.get(headers, "content-length", "0")) do
      {length, ""} when length > max ->
        {:error, 413, "the request body is #{length} bytes, over the #{max}-byte limit"}

      {length, ""} when length >= 0 ->
        {:ok, length}

      _ ->
        {:error, 400, "malformed Content-Length"}
    end
  end

  defp body(_socket, buffer, length, _timeout) when byte_size(buffer) >= length do
    <<body::binary-size(length), rest::binary>> = buffer
    {:ok, body, rest}
  end

  defp body(socket, buffer, length, timeout) do
    with {:ok, more} <- recv(socket, timeout, false),
         do: body(socket, buffer <> more, length, timeout)
  end

  # Nothing received yet between requests: a close or a quiet client is
  # the end of the connection, not an error.
  defp recv(socket, timeout, idle?) do
    case :gen_tcp.recv(socket, 0, timeout) do
      {:ok, data} -> {:ok, data}
      {:error, _} when idle? -> :closed
      {:error, :timeout} -> {:error, 408, "the request was not received in time"}
      {:error, _} -> :closed
    end
  end

  @doc "A whole response: status, headers (`{name, value}`), body."
  @spec response(pos_integer(), [{String.t(), String.t()}], iodata()) :: iodata()
  def response(status, headers, body) do
    [
      status_line(status),
      Enum.map(headers, fn {name, value} -> [name, ": ", value, "\r\n"] end),
      "content-length: ",
      Integer.to_string(IO.iodata_length(body)),
      "\r\n\r\n",
      body
    ]
  end

  @doc "The head of a `text/event-stream` response, its body chunked."
  @spec event_stream_head([{String.t(), String.t()}]) :: iodata()
  def event_stream_head(headers) do
    [
      status_line(200),
      "content-type: text/event-stream\r\ncache-control: no-cache\r\n",
      "transfer-encoding: chunked\r\n",
      Enum.map(headers, fn {name, value} -> [name, ": ", value, "\r\n"] end),
      "\r\n"
    ]
  end

  @doc "One server-sent event carrying a JSON-RPC message, as a chunk."
  @spec event(iodata()) :: iodata()
  def event(json), do: chunk(["event: message\ndata: ", json, "\n\n"])

  @doc "An SSE comment, as a chunk: it keeps a quiet stream alive."
  @spec keepalive() :: iodata()
  def keepalive, do: chunk(": keepalive\n\n")

  @doc "The chunk that ends a chunked body."
  @spec last_chunk() :: iodata()
  def last_chunk, do: "0\r\n\r\n"

  defp chunk(data),
    do: [Integer.to_string(IO.iodata_length(data), 16), "\r\n", data, "\r\n"]

  @reasons %{
    200 => "OK",
    202 => "Accepted",
    400 => "Bad Request",
    403 => "Forbidden",
    404 => "Not Found",
    405 => "Method Not Allowed",
    408 => "Request Timeout",
    411 => "Length Required",
    413 => "Content Too Large",
    415 => "Unsupported Media Type",
    431 => "Request Header Fields Too Large",
    500 => "Internal Server Error",
    503 => "Service Unavailable"
  }

  defp status_line(status),
    do: ["HTTP/1.1 ", Integer.to_string(status), " ", Map.get(@reasons, status, "Status"), "\r\n"]
end
