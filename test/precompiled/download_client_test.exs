defmodule ExBashkit.Precompiled.DownloadClientTest do
  # The HTTP client of the precompiled path (`ExBashkit.Build.Download`,
  # loaded by mix.exs) against real servers on 127.0.0.1: HTTPS with peer
  # and host-name verification, and redirects (GitHub release downloads
  # redirect to their storage host).
  use ExUnit.Case, async: false

  alias ExBashkit.Build.Download
  alias ExBashkit.Test.{HttpServer, TlsHttpServer}

  @moduletag :precompiled
  @moduletag :tmp_dir
  # The TLS stack logs every refused handshake.
  @moduletag capture_log: true

  setup do
    previous = System.get_env("EX_BASHKIT_CACERTFILE")

    on_exit(fn ->
      if previous,
        do: System.put_env("EX_BASHKIT_CACERTFILE", previous),
        else: System.delete_env("EX_BASHKIT_CACERTFILE")
    end)
  end

  test "HTTPS: a server whose chain the client trusts answers", %{tmp_dir: dir} do
    server = TlsHttpServer.start!("artifact bytes", dir)
    System.put_env("EX_BASHKIT_CACERTFILE", server.ca_file)

    assert Download.get("https://localhost:#{server.port}/a.tar.gz") == {:ok, "artifact bytes"}
  end

  test "HTTPS: an unknown CA is refused", %{tmp_dir: dir} do
    server = TlsHttpServer.start!("artifact bytes", dir)
    # The OS trust store does not know the test CA.
    System.delete_env("EX_BASHKIT_CACERTFILE")

    assert {:error, "cannot connect" <> reason} =
             Download.get("https://localhost:#{server.port}/a.tar.gz")

    assert reason =~ "TLS unknown_ca"
  end

  test "HTTPS: a certificate for another host name is refused", %{tmp_dir: dir} do
    server = TlsHttpServer.start!("artifact bytes", dir)
    System.put_env("EX_BASHKIT_CACERTFILE", server.ca_file)

    # The certificate names localhost, not 127.0.0.1.
    assert {:error, "cannot connect" <> reason} =
             Download.get("https://127.0.0.1:#{server.port}/a.tar.gz")

    assert reason =~ "hostname_check_failed"
  end

  test "redirects are followed; a final 404 is reported as such" do
    server =
      HttpServer.start!(
        handler: fn
          "GET", "/release/a.tar.gz" -> {302, [{"location", "/storage/a.tar.gz"}], ""}
          "GET", "/storage/a.tar.gz" -> {200, [], "stored bytes"}
          "GET", "/release/b.tar.gz" -> {302, [{"location", "/storage/b.tar.gz"}], ""}
          _, _ -> {404, [], "not found"}
        end
      )

    assert Download.get(server.url <> "/release/a.tar.gz") == {:ok, "stored bytes"}
    assert_received {:http_request, _, "GET", "/storage/a.tar.gz"}
    assert {:error, "HTTP 404" <> _} = Download.get(server.url <> "/release/b.tar.gz")
  end
end
