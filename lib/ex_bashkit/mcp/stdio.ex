defmodule ExBashkit.MCP.Stdio do
  @moduledoc """
  MCP's stdio transport: newline-delimited JSON-RPC messages on an input
  device, answers on an output device, one `ExBashkit.MCP.Session` for the
  connection. `mix ex_bashkit.mcp` serves it on the process's stdin and
  stdout.

  A line that is not JSON is a parse error answered with id `null`; a line
  over `:max_message_bytes` is refused the same way without being parsed.
  Lines are read while calls run, so `ping` and `notifications/cancelled`
  are served meanwhile. At end of input the requests already read are
  answered, then the session ends and `serve/1` returns.
  """

  alias ExBashkit.MCP.{JSON, Protocol, Session}

  @default_max_message_bytes 16 * 1024 * 1024

  @doc """
  Serve one MCP connection until end of input; returns `:ok`.

  Options:

    * `:session` - the sandbox: a session, or options of
      `ExBashkit.Session.new/1` (default `[]`); or `:pool` - an
      `ExBashkit.Pool` to take it from.
    * `:history` - `true` to serve the history tools too
      (`ExBashkit.Tool.History`; default `false`).
    * `:input`, `:output` - IO devices (default `:stdio` for both).
    * `:max_message_bytes` - the longest line accepted (default 16 MiB).
  """
  @spec serve(keyword()) :: :ok
  def serve(opts \\ []) do
    input = Keyword.get(opts, :input, :stdio)
    output = Keyword.get(opts, :output, :stdio)
    max = Keyword.get(opts, :max_message_bytes, @default_max_message_bytes)
    {:ok, server} = Session.start_link(Keyword.take(opts, [:session, :pool, :history]))
    monitor = Process.monitor(server)
    me = self()
    reader = spawn_link(fn -> read(input, me) end)

    try do
      loop(%{server: server, monitor: monitor, reader: reader, output: output, max: max})
    after
      Process.unlink(reader)
      Process.exit(reader, :kill)
      Process.unlink(server)
      Session.close(server)
    end
  end

  defp loop(state) do
    receive do
      {:stdin, reader, :eof} when reader == state.reader ->
        Session.drain(state.server, {self(), :stdio})
        loop(state)

      {:stdio, :drained} ->
        :ok

      {:stdin, reader, line} when reader == state.reader ->
        message(String.trim_trailing(line, "\n"), state)
        send(reader, :next)
        loop(state)

      {:stdio, {:reply, response}} ->
        write(state.output, response)
        loop(state)

      {:stdio, :cancelled} ->
        loop(state)

      {:DOWN, monitor, :process, _, _} when monitor == state.monitor ->
        :ok
    end
  end

  defp message(line, state) do
    line = String.trim_trailing(line, "\r")

    cond do
      line == "" ->
        :ok

      byte_size(line) > state.max ->
        message = "the message is #{byte_size(line)} bytes, over the #{state.max}-byte limit"
        write(state.output, Protocol.error(nil, :parse_error, message))

      true ->
        case JSON.decode(line) do
          {:ok, decoded} -> Session.dispatch(state.server, decoded, {self(), :stdio})
          {:error, message} -> write(state.output, Protocol.error(nil, :parse_error, message))
        end
    end
  end

  defp write(output, response), do: IO.binwrite(output, [JSON.encode!(response), "\n"])

  # One line at a time: the next is read when the loop has taken this one,
  # so a fast writer cannot fill the loop's mailbox.
  defp read(input, loop) do
    case IO.binread(input, :line) do
      line when is_binary(line) ->
        send(loop, {:stdin, self(), line})

        receive do
          :next -> read(input, loop)
        end

      _eof_or_error ->
        send(loop, {:stdin, self(), :eof})
    end
  end
end
