defmodule ExBashkit.Security.NetworkTest do
  # Network escapes. A real HTTP server listens on loopback and counts the
  # connections it accepts, so "blocked" means no TCP connection was made at
  # all, not merely that the script saw an error. Each blocked URL is put on
  # the session's allowlist itself, so what stops it is the private-IP block,
  # not the allowlist.
  #
  # Private addresses other than loopback (169.254.169.254, 10/8, ...) are
  # only ever tried from a child VM inside an empty network namespace: if the
  # block ever regressed, the request could not leave this machine.
  use ExUnit.Case, async: true

  alias ExBashkit.{Result, Session}
  alias ExBashkit.Test.{ChildVM, HttpServer}

  @secret "SECRET-FROM-LOOPBACK"

  setup do
    server =
      HttpServer.start!(
        routes: %{
          "/" => {200, [], @secret},
          "/secret" => {200, [], @secret},
          "/v1/ok" => {200, [], "public"}
        }
      )

    %{server: server, port: server.port}
  end

  # Run `script` in a session allowed to reach `url` exactly, private IPs
  # blocked (the default); assert the server saw no connection.
  defp assert_blocked(ctx, url, script \\ nil, opts \\ []) do
    before = HttpServer.connections(ctx.server)
    s = Session.new(Keyword.merge([allow_net: [url]], opts))
    {:ok, %Result{} = r} = Session.exec(s, script || "curl -s -m 5 #{url}")
    refute r.stdout =~ @secret
    # The 404 principle: refused as a host that does not resolve (an IP
    # literal never fails DNS, so this is the private-address block).
    assert r.stderr =~ "Could not resolve host", "not blocked as a private address: #{inspect(r)}"
    refute r.stderr =~ ~r/denied|SSRF|blocked|private/i
    assert HttpServer.connections(ctx.server) == before, "a TCP connection reached the server"
    r
  end

  describe "no network unless granted" do
    test "without :allow_net nothing is reachable, even with block_private_ips: false", ctx do
      s = Session.new(block_private_ips: false)

      for cmd <- ["curl -s", "wget -q -O -", "http GET"] do
        {:ok, %Result{stdout: out, stderr: err}} =
          Session.exec(s, "#{cmd} http://127.0.0.1:#{ctx.port}/")

        refute out =~ @secret
        assert err =~ "Could not resolve host: 127.0.0.1"
      end

      assert HttpServer.connections(ctx.server) == 0
    end

    test "there is no raw socket: /dev/tcp, nc, ssh, telnet", ctx do
      s = Session.new(allow_net: :all, block_private_ips: false)

      Session.exec(s, """
      echo -e 'GET / HTTP/1.0\\r\\n\\r\\n' > /dev/tcp/127.0.0.1/#{ctx.port}
      exec 3<>/dev/tcp/127.0.0.1/#{ctx.port}
      nc 127.0.0.1 #{ctx.port} < /dev/null
      ssh -p #{ctx.port} 127.0.0.1 true
      telnet 127.0.0.1 #{ctx.port}
      """)

      assert HttpServer.connections(ctx.server) == 0
    end

    test "positive control: with private IPs allowed the same server is reached", ctx do
      s = Session.new(allow_net: ["http://127.0.0.1:#{ctx.port}"], block_private_ips: false)

      assert {:ok, %Result{stdout: @secret}} =
               Session.exec(s, "curl -s http://127.0.0.1:#{ctx.port}/")

      assert HttpServer.connections(ctx.server) == 1
    end
  end

  describe "loopback is blocked even when allowlisted" do
    test "127.0.0.1", ctx do
      assert_blocked(ctx, "http://127.0.0.1:#{ctx.port}/")
    end

    test "127.0.0.1 through wget and http too", ctx do
      url = "http://127.0.0.1:#{ctx.port}/"
      assert_blocked(ctx, url, "wget -q -O - #{url}")
      assert_blocked(ctx, url, "http GET #{url}")
    end

    test "localhost (blocked once resolved: the DNS-rebinding path)", ctx do
      r = assert_blocked(ctx, "http://localhost:#{ctx.port}/")
      assert r.stderr =~ "Could not resolve host"
    end

    test "[::1]", ctx do
      case HttpServer.start(ip: {0, 0, 0, 0, 0, 0, 0, 1}, routes: %{"/" => {200, [], @secret}}) do
        {:ok, v6} ->
          v6_ctx = %{ctx | server: v6}
          assert_blocked(v6_ctx, "http://[::1]:#{v6.port}/")

        {:error, reason} ->
          # No IPv6 loopback on this host: the request cannot connect anyway;
          # still check it is refused as private, before connecting.
          s = Session.new(allow_net: ["http://[::1]:#{ctx.port}/"])
          {:ok, r} = Session.exec(s, "curl -s http://[::1]:#{ctx.port}/")

          assert r.stderr =~ "Could not resolve host",
                 "no ::1 here (#{inspect(reason)}); #{inspect(r)}"
      end
    end

    test "IPv4-mapped IPv6: [::ffff:127.0.0.1] and [::ffff:7f00:1]", ctx do
      assert_blocked(ctx, "http://[::ffff:127.0.0.1]:#{ctx.port}/")
      assert_blocked(ctx, "http://[::ffff:7f00:1]:#{ctx.port}/")
    end

    test "decimal, octal, hex and short IPv4 forms", ctx do
      for host <- [
            "2130706433",
            "0177.0.0.1",
            "0x7f.0.0.1",
            "0x7f000001",
            "127.1",
            "127.0.1",
            "017700000001"
          ] do
        assert_blocked(ctx, "http://#{host}:#{ctx.port}/")
      end
    end

    test "other loopback addresses and 0.0.0.0", ctx do
      for host <- ["127.0.0.2", "127.255.255.254", "0.0.0.0", "0"] do
        assert_blocked(ctx, "http://#{host}:#{ctx.port}/")
      end
    end

    test "allow_net: :all lifts the allowlist, not the private-IP block", ctx do
      s = Session.new(allow_net: :all)

      for url <- ["http://127.0.0.1:#{ctx.port}/", "http://localhost:#{ctx.port}/"] do
        {:ok, r} = Session.exec(s, "curl -s #{url}")
        assert r.stderr =~ "Could not resolve host"
      end

      assert HttpServer.connections(ctx.server) == 0
    end
  end

  describe "redirects" do
    # The test server can only live on loopback, so the origin must be
    # allowed with block_private_ips: false; what is tested is that the hop
    # is checked again, against the allowlist, and never followed blindly.
    setup ctx do
      v6 =
        HttpServer.start!(
          ip: {0, 0, 0, 0, 0, 0, 0, 1},
          routes: %{"/secret" => {200, [], @secret}}
        )

      base = "http://127.0.0.1:#{ctx.port}"

      targets = [
        base <> "/secret",
        "http://localhost:#{ctx.port}/secret",
        "http://[::1]:#{v6.port}/secret",
        "http://169.254.169.254/latest/meta-data/",
        "file:///etc/passwd"
      ]

      bouncer =
        HttpServer.start!(
          routes:
            targets
            |> Enum.with_index()
            |> Map.new(fn {target, i} ->
              {"/allowed/#{i}", {302, [{"location", target}], "moved"}}
            end)
        )

      %{bouncer: bouncer, targets: targets, v6: v6}
    end

    test "a redirect from an allowed URL to a private or unlisted one is not followed", ctx do
      allowed = "http://127.0.0.1:#{ctx.bouncer.port}/allowed"
      s = Session.new(allow_net: [allowed], block_private_ips: false)

      for {_target, i} <- Enum.with_index(ctx.targets) do
        url = "#{allowed}/#{i}"

        for script <- [
              "curl -s -L #{url}",
              "curl -L --max-redirs 50 #{url}",
              "wget -q -O - #{url}",
              "http GET #{url}"
            ] do
          {:ok, r} = Session.exec(s, script)
          refute r.stdout =~ @secret, "#{script} followed a redirect"
          refute r.stdout =~ "root:", "#{script} followed a redirect to file://"
        end
      end

      # The bouncer was asked; the targets never were.
      assert HttpServer.requests(ctx.server) == []
      assert HttpServer.requests(ctx.v6) == []
      assert Enum.all?(HttpServer.requests(ctx.bouncer), &(&1 =~ "/allowed/"))
    end

    test "positive control: a hop to an allowlisted URL is followed", ctx do
      bouncer = "http://127.0.0.1:#{ctx.bouncer.port}"
      target = "http://127.0.0.1:#{ctx.port}"

      s =
        Session.new(
          allow_net: [bouncer <> "/allowed", target <> "/secret"],
          block_private_ips: false
        )

      assert {:ok, %Result{stdout: @secret}} = Session.exec(s, "curl -s -L #{bouncer}/allowed/0")
      assert HttpServer.requests(ctx.server) == ["GET /secret HTTP/1.1"]
    end
  end

  describe "the host's proxy settings" do
    test "HTTP_PROXY and friends in the host environment are ignored", ctx do
      proxy = HttpServer.start!(routes: %{})
      proxy_url = "http://127.0.0.1:#{proxy.port}"
      vars = ~w(HTTP_PROXY http_proxy HTTPS_PROXY https_proxy ALL_PROXY all_proxy)
      for var <- vars, do: System.put_env(var, proxy_url)

      try do
        s = Session.new(allow_net: ["http://127.0.0.1:#{ctx.port}"], block_private_ips: false)

        assert {:ok, %Result{stdout: @secret}} =
                 Session.exec(s, "curl -s http://127.0.0.1:#{ctx.port}/")
      after
        for var <- vars, do: System.delete_env(var)
      end

      assert HttpServer.connections(proxy) == 0, "sandbox traffic went through the host's proxy"
    end
  end

  describe "the allowlist's path prefix" do
    test "cannot be escaped with dot segments or a longer segment", ctx do
      base = "http://127.0.0.1:#{ctx.port}"
      s = Session.new(allow_net: [base <> "/v1"], block_private_ips: false)

      for path <- [
            "/v1/../secret",
            "/v1/%2e%2e/secret",
            "/v1/./../secret",
            "/v10",
            "/v1.secret",
            "/V1/ok",
            "//v1/ok"
          ] do
        {:ok, r} = Session.exec(s, "curl -s '#{base}#{path}'")
        refute r.stdout =~ @secret, "#{path} escaped the prefix"
      end

      # Everything that did reach the server was under /v1/.
      for request <- HttpServer.requests(ctx.server) do
        assert request =~ ~r{^GET /v1/}, "request outside the prefix: #{request}"
      end

      assert {:ok, %Result{stdout: "public"}} = Session.exec(s, "curl -s #{base}/v1/ok")
    end
  end

  describe "private addresses beyond loopback (in an empty network namespace)" do
    @private_urls [
      # Cloud metadata, in every spelling.
      "http://169.254.169.254/latest/meta-data/",
      "http://2852039166/",
      "http://0251.0376.0251.0376/",
      "http://0xa9fea9fe/",
      "http://169.254.43518/",
      "http://[::ffff:169.254.169.254]/",
      "http://[::ffff:a9fe:a9fe]/",
      "http://[64:ff9b::a9fe:a9fe]/",
      "http://[2002:a9fe:a9fe::]/",
      "http://[fd00:ec2::254]/",
      # RFC 1918, CGNAT, ULA, link-local, multicast, broadcast.
      "http://10.0.0.1/",
      "http://172.16.0.1/",
      "http://192.168.1.1/",
      "http://100.64.0.1/",
      "http://[fd00::1]/",
      "http://[fe80::1]/",
      "http://224.0.0.1/",
      "http://255.255.255.255/",
      "http://[::]/"
    ]

    test "169.254.169.254 and friends are refused before any connection" do
      code = """
      for url <- #{inspect(@private_urls)} do
        s = ExBashkit.Session.new(allow_net: [url])
        {:ok, a} = ExBashkit.Session.exec(s, "curl -s -m 5 " <> url)
        {:ok, b} = ExBashkit.Session.exec(ExBashkit.Session.new(allow_net: :all), "wget -q -O - " <> url)
        IO.puts("RESULT " <> url <> " " <> inspect({a.stdout <> b.stdout, a.stderr <> b.stderr}))
      end
      """

      {output, status} = ChildVM.run(code, netns: true)
      assert status == 0, output

      results =
        for "RESULT " <> line <- String.split(output, "\n"), into: %{} do
          [url, rest] = String.split(line, " ", parts: 2)
          {url, rest}
        end

      for url <- @private_urls do
        assert Map.has_key?(results, url), "no result for #{url}:\n#{output}"
        {out, err} = Code.eval_string(results[url]) |> elem(0)
        assert out == ""
        # Refused by the private-address check, not by the empty namespace
        # (where a literal address would fail to connect, not to resolve),
        # and in the words of an absent host (the 404 principle).
        assert Regex.scan(~r/Could not resolve host/, err) |> length() == 2,
               "#{url} was not refused as private: #{err}"
      end
    end
  end
end
