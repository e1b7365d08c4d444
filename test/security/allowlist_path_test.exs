defmodule ExBashkit.Security.AllowlistPathTest do
  # An `:allow_net` path prefix cannot be escaped with encoded separators or
  # dots (issue 22, item 6). A real HTTP server on loopback records every
  # request line it reads, so "refused" means the request never reached it.
  use ExUnit.Case, async: true

  alias ExBashkit.{Result, Session}
  alias ExBashkit.Test.HttpServer

  @secret "SECRET-OUTSIDE-THE-PREFIX"

  setup do
    server =
      HttpServer.start!(
        routes: %{
          "/allowed/ok" => {200, [], "public"},
          "/allowed/hop" => {302, [{"location", "/allowed/..%2fsecret.txt"}], "moved"},
          "/allowed/hop2" => {302, [{"location", "/allowed/%2E%2E%2Fsecret.txt"}], "moved"},
          "/secret.txt" => {200, [], @secret}
        }
      )

    base = "http://127.0.0.1:#{server.port}"
    session = Session.new(allow_net: [base <> "/allowed"], block_private_ips: false)
    %{server: server, base: base, session: session}
  end

  defp escaping_requests(server),
    do: Enum.reject(HttpServer.requests(server), &(&1 =~ ~r{^GET /allowed/(ok|hop2?) }))

  test "positive control: the prefix itself is reachable", ctx do
    assert {:ok, %Result{stdout: "public", exit_code: 0}} =
             Session.exec(ctx.session, "curl -s #{ctx.base}/allowed/ok")
  end

  test "encoded separators and dots are answered 404 before any request", ctx do
    for path <- [
          "/allowed/..%2fsecret.txt",
          "/allowed/..%2Fsecret.txt",
          "/allowed/%2E%2E%2Fsecret.txt",
          "/allowed/%2e%2e/secret.txt",
          "/allowed/.%2e/secret.txt",
          "/allowed/..%5csecret.txt",
          "/allowed/x/..%2f..%2fsecret.txt"
        ],
        cmd <- ["curl -s", "wget -q -O -", "http GET"] do
      {:ok, %Result{} = r} = Session.exec(ctx.session, "#{cmd} '#{ctx.base}#{path}'")
      refute r.stdout =~ @secret, "#{cmd} #{path}: #{inspect(r)}"
      # The 404 principle: answered as a missing page, never as refused.
      refute r.stderr =~ ~r/denied|cancelled|not allowed/i, "#{cmd} #{path}: #{inspect(r)}"
    end

    assert escaping_requests(ctx.server) == []
  end

  test "an allowed redirect to an encoded escape is not followed", ctx do
    for hop <- ["hop", "hop2"] do
      {:ok, %Result{} = r} = Session.exec(ctx.session, "curl -s -L #{ctx.base}/allowed/#{hop}")
      refute r.stdout =~ @secret, inspect(r)
    end

    assert escaping_requests(ctx.server) == []
  end

  test "a pattern with a dot segment is refused, not widened to the whole host", ctx do
    for pattern <- [
          "#{ctx.base}/allowed/..",
          "#{ctx.base}/allowed/../",
          "#{ctx.base}/a/./b",
          "#{ctx.base}/allowed/%2e%2e",
          "#{ctx.base}/allowed%2f.."
        ] do
      assert_raise ArgumentError, ~r/segment/, fn ->
        Session.new(allow_net: [pattern], block_private_ips: false)
      end
    end

    assert HttpServer.requests(ctx.server) == []
  end
end
