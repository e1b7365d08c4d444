defmodule ExBashkit.Test.TlsHttpServer do
  @moduledoc false
  # A tiny HTTPS server on 127.0.0.1 with a certificate chain made on the spot
  # (`:public_key.pkix_test_data/1`, ECDSA P-256): a test CA and a server
  # certificate for `localhost`. Every request gets `body` with status 200.
  #
  #     server = TlsHttpServer.start!("hello")
  #     server.port; server.ca_file   # PEM of the test CA, for clients to trust
  #
  # The server is started supervised and stops with the test.

  @doc "Starts a server answering `body`; returns `%{pid, port, ca_file}`."
  def start!(body, dir) do
    {:ok, _} = Application.ensure_all_started(:ssl)
    key = [key: {:namedCurve, :secp256r1}, digest: :sha256]
    san = {:Extension, {2, 5, 29, 17}, false, [{:dNSName, ~c"localhost"}]}

    data =
      :public_key.pkix_test_data(%{
        server_chain: %{root: key, intermediates: [], peer: key ++ [extensions: [san]]},
        client_chain: %{root: key, intermediates: [], peer: key}
      })

    ca_file = Path.join(dir, "test-ca.pem")
    cas = for der <- data[:client_config][:cacerts], do: {:Certificate, der, :not_encrypted}
    File.write!(ca_file, :public_key.pem_encode(cas))

    owner = self()
    server_opts = data[:server_config]

    pid =
      ExUnit.Callbacks.start_supervised!(%{
        id: make_ref(),
        restart: :temporary,
        start: {Task, :start_link, [fn -> listen(owner, server_opts, body) end]}
      })

    receive do
      {:tls_server_listening, ^pid, port} -> %{pid: pid, port: port, ca_file: ca_file}
    after
      5_000 -> raise "test TLS server did not start"
    end
  end

  defp listen(owner, server_opts, body) do
    {:ok, listen} =
      :ssl.listen(
        0,
        # Refused handshakes are what the tests provoke: not worth a log line.
        [ip: {127, 0, 0, 1}, mode: :binary, active: false, reuseaddr: true, log_level: :none] ++
          server_opts
      )

    {:ok, {_, port}} = :ssl.sockname(listen)
    send(owner, {:tls_server_listening, self(), port})
    accept(listen, body)
  end

  defp accept(listen, body) do
    {:ok, socket} = :ssl.transport_accept(listen)
    pid = spawn(fn -> serve(socket, body) end)
    :ssl.controlling_process(socket, pid)
    send(pid, :go)
    accept(listen, body)
  end

  # A failed handshake (a client that does not trust us) just closes.
  defp serve(socket, body) do
    receive do
      :go -> :ok
    after
      5_000 -> :ok
    end

    with {:ok, socket} <- :ssl.handshake(socket, 5_000),
         {:ok, _request} <- :ssl.recv(socket, 0, 5_000) do
      :ssl.send(socket, [
        "HTTP/1.1 200 OK\r\ncontent-length: #{byte_size(body)}\r\nconnection: close\r\n\r\n",
        body
      ])

      :ssl.close(socket)
    end
  end
end
