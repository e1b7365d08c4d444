defmodule ExBashkit.Policy.NetTest do
  # Network access through `:allow_net` / `:block_private_ips`, proved against
  # real HTTP servers this test starts on 127.0.0.1 and ::1. A request the
  # policy refuses must never reach a server: each server reports every
  # request it receives to the test process, and the reply to the script is
  # sent after that report, so once `exec/2` has returned, a request that was
  # made is already in the mailbox.
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.Session
  alias ExBashkit.Test.HttpServer

  # The 404 principle: a refused host reads as one that does not resolve,
  # never as refused.
  defp assert_refused(result, pattern \\ ~r/Could not resolve host: /) do
    assert result.exit_code != 0, "expected a failure, got: #{inspect(result)}"
    assert result.stdout == ""
    assert result.stderr =~ pattern
    refute result.stderr =~ ~r/denied|allowlist|not allowed|SSRF|blocked|private|policy/i
  end

  defp refute_request(%{pid: pid}), do: refute_received({:http_request, ^pid, _, _})

  setup do
    %{server: HttpServer.start!()}
  end

  describe "no :allow_net (the default)" do
    test "curl, wget and http fail with a message on stderr", %{server: server} do
      session = Session.new()

      for script <- [
            "curl -s #{server.url}/x",
            "wget -q -O - #{server.url}/x",
            "http GET #{server.url}/x"
          ] do
        result = run!(session, script)
        assert_refused(result, ~r/Could not resolve host: 127.0.0.1/)
      end

      refute_request(server)
    end

    test "there is no other way out: /dev/tcp is not a socket", %{server: server} do
      session = Session.new(allow_net: :all, block_private_ips: false)
      tcp = "/dev/tcp/127.0.0.1/#{server.port}"
      run!(session, "printf 'GET /tcp HTTP/1.0\\r\\n\\r\\n' > #{tcp}; cat < #{tcp}")
      assert HttpServer.connections(server) == 0
    end

    test "an empty list is no network either", %{server: server} do
      result = run!(Session.new(allow_net: []), "curl -s #{server.url}/x")
      assert_refused(result)
      refute_request(server)
    end
  end

  describe "allowlisted loopback" do
    test "is still refused while private IPs are blocked (the default)", %{server: server} do
      session = Session.new(allow_net: [server.url])
      result = run!(session, "curl -s #{server.url}/x")
      assert_refused(result, ~r/Could not resolve host: 127.0.0.1/)
      refute_request(server)
    end

    test "is served with block_private_ips: false, by curl, wget and http", %{server: server} do
      session = Session.new(allow_net: [server.url], block_private_ips: false)

      assert %{exit_code: 0, stdout: "served /a"} = run!(session, "curl -s #{server.url}/a")
      assert_received {:http_request, _, "GET", "/a"}

      assert %{exit_code: 0, stdout: "served /b"} = run!(session, "wget -q -O - #{server.url}/b")
      assert_received {:http_request, _, "GET", "/b"}

      assert %{exit_code: 0, stdout: "served /c"} = run!(session, "http GET #{server.url}/c")
      assert_received {:http_request, _, "GET", "/c"}
      assert HttpServer.connections(server) == 3
    end
  end

  describe "pattern matching" do
    test "the path is a prefix matched at a segment boundary", %{server: server} do
      session = Session.new(allow_net: [server.url <> "/api"], block_private_ips: false)

      assert %{exit_code: 0, stdout: "served /api/v1/users"} =
               run!(session, "curl -s #{server.url}/api/v1/users")

      assert_received {:http_request, _, "GET", "/api/v1/users"}

      # A path outside the prefix of an allowed host is absent: a 404 that
      # never reaches the server.
      for path <- ["/apix", "/other", "/", "/api/../admin"] do
        result = run!(session, "curl -s -w ' %{http_code}' '#{server.url}#{path}'")
        assert %{exit_code: 0, stdout: "Not Found\n 404"} = result
        assert %{exit_code: 22} = run!(session, "curl -s -f '#{server.url}#{path}'")
      end

      refute_request(server)
    end

    test "scheme and port must match exactly", %{server: server} do
      other_port = HttpServer.start!()

      for pattern <- [
            "https://127.0.0.1:#{server.port}",
            "http://127.0.0.1:#{other_port.port}",
            "http://localhost:#{server.port}"
          ] do
        session = Session.new(allow_net: [pattern], block_private_ips: false)
        result = run!(session, "curl -s #{server.url}/x")
        assert_refused(result)
      end

      refute_request(server)
      refute_request(other_port)
    end

    test "allow_net: :all lifts the allowlist but not the private-IP block", %{server: server} do
      result = run!(Session.new(allow_net: :all), "curl -s #{server.url}/x")
      assert_refused(result)
      refute_request(server)

      open = Session.new(allow_net: :all, block_private_ips: false)

      assert %{exit_code: 0, stdout: "served /anything"} =
               run!(open, "curl -s #{server.url}/anything")

      assert_received {:http_request, _, "GET", "/anything"}
    end
  end

  describe "the 404 principle" do
    test "a refused host fails exactly like a host that does not resolve", %{server: server} do
      # `nx.invalid` is allowed but cannot resolve (RFC 2606); `denied.invalid`
      # is not allowed. A script cannot tell the two apart.
      session = Session.new(allow_net: ["http://nx.invalid"])

      for tool <- ["curl -s", "curl", "wget -q -O -", "http GET"] do
        missing = run!(session, "#{tool} http://nx.invalid/x")
        denied = run!(session, "#{tool} http://denied.invalid/x")
        assert missing.exit_code != 0
        assert missing.stderr =~ "Could not resolve host: nx.invalid"

        assert {denied.stdout, denied.exit_code,
                String.replace(denied.stderr, "denied.invalid", "nx.invalid")} ==
                 {missing.stdout, missing.exit_code, missing.stderr}
      end

      refute_request(server)
    end

    test "with no :allow_net every host is absent, loopback included", %{server: server} do
      session = Session.new()

      for url <- [server.url <> "/x", "http://example.com/", "https://10.0.0.1/"] do
        result = run!(session, "curl -s #{url}; echo \" $?\"")
        refute result.stderr =~ ~r/denied|allowlist|SSRF|blocked/i
        assert result.stderr =~ "Could not resolve host"
      end

      refute_request(server)
    end

    test "an ambiguous encoded path on an allowed host is a 404", %{server: server} do
      session = Session.new(allow_net: [server.url <> "/allowed"], block_private_ips: false)
      result = run!(session, "curl -s -w ' %{http_code}' '#{server.url}/allowed/..%2fsecret.txt'")
      assert result.stdout == "Not Found\n 404"
      refute_request(server)
    end
  end

  describe "redirects" do
    setup %{server: target} do
      bouncer =
        HttpServer.start!(
          handler: fn _method, "/go/" <> where ->
            {302, [{"location", URI.decode(where)}], "moved"}
          end
        )

      %{bouncer: bouncer, target: target}
    end

    test "are not followed: the script gets the 302 itself", %{bouncer: bouncer, target: target} do
      session = Session.new(allow_net: [bouncer.url], block_private_ips: false)
      to = URI.encode_www_form(target.url <> "/secret")

      result = run!(session, "curl -s -w '%{http_code}' #{bouncer.url}/go/#{to}")
      assert %{exit_code: 0, stdout: "moved302"} = result
      assert_received {:http_request, _, "GET", "/go/" <> _}
      refute_request(target)
    end

    test "curl -L refuses a hop to an unlisted URL", %{bouncer: bouncer, target: target} do
      session = Session.new(allow_net: [bouncer.url], block_private_ips: false)
      to = URI.encode_www_form(target.url <> "/secret")

      result = run!(session, "curl -s -L #{bouncer.url}/go/#{to}")
      assert_refused(result)
      refute_request(target)
    end

    test "curl -L follows a hop to an allowlisted URL", %{bouncer: bouncer, target: target} do
      session = Session.new(allow_net: [bouncer.url, target.url], block_private_ips: false)
      to = URI.encode_www_form(target.url <> "/fine")

      assert %{exit_code: 0, stdout: "served /fine"} =
               run!(session, "curl -s -L #{bouncer.url}/go/#{to}")

      assert_received {:http_request, _, "GET", "/fine"}
    end
  end

  describe "what reaches an allowed server" do
    test "the Host header is the URL's host, whatever the script sets", %{server: server} do
      session = Session.new(allow_net: [server.url], block_private_ips: false)
      url = "#{server.url}/vhost"

      for cmd <- [
            "curl -s -H 'Host: internal-admin.svc' #{url}",
            "curl -s -H 'host:internal-admin.svc' #{url}",
            "wget -q -O - --header 'Host: internal-admin.svc' #{url}",
            "http GET #{url} Host:internal-admin.svc"
          ] do
        assert %{stdout: "served /vhost"} = run!(session, cmd), cmd
      end

      heads = HttpServer.heads(server)
      assert length(heads) == 4

      for head <- heads do
        hosts = Regex.scan(~r/^host: *(.*)$/im, head, capture: :all_but_first)
        assert hosts == [["127.0.0.1:#{server.port}\r"]], head
      end
    end

    test "a gzip body that inflates past the cap fails curl, not the script" do
      bomb = :zlib.gzip(:binary.copy(<<0>>, 11 * 1024 * 1024))

      server =
        HttpServer.start!(routes: %{"/bomb" => {200, [{"content-encoding", "gzip"}], bomb}})

      session = Session.new(allow_net: [server.url], block_private_ips: false)

      result =
        run!(session, """
        if ! curl -s --compressed #{server.url}/bomb > /tmp/out; then echo failed; fi
        curl -s --compressed #{server.url}/bomb > /tmp/out
        echo "after $?"
        """)

      assert result.stdout =~ ~r/^failed\nafter [1-9]\d*\n$/
      assert result.stderr =~ ~r/^curl: .*response too large/

      # Without --compressed the body is passed through as sent.
      size = byte_size(bomb)
      assert %{stdout: out} = run!(session, "curl -s #{server.url}/bomb | wc -c | tr -d ' '")
      assert out == "#{size}\n"
    end
  end

  describe "other spellings of a private address" do
    # The URL parser bashkit uses (WHATWG rules) turns every IPv4 spelling
    # into dotted-quad before the allowlist and the private-IP check see it;
    # names go through DNS and are checked on every resolved address.
    test "decimal, hex, octal and short IPv4 forms, localhost and 0.0.0.0", %{server: server} do
      session = Session.new(allow_net: :all)
      port = server.port

      for host <- ["2130706433", "0x7f000001", "0177.0.0.1", "127.1", "localhost", "0.0.0.0"] do
        result = run!(session, "curl -s http://#{host}:#{port}/x")
        assert_refused(result)
      end

      refute_request(server)
    end

    test "IPv6 loopback and v4-mapped forms" do
      v6 = HttpServer.start!(ip: {0, 0, 0, 0, 0, 0, 0, 1})
      session = Session.new(allow_net: :all)

      for url <- [
            v6.url,
            "http://[::ffff:127.0.0.1]:#{v6.port}",
            "http://[::ffff:7f00:1]:#{v6.port}",
            "http://[0:0:0:0:0:0:0:1]:#{v6.port}"
          ] do
        result = run!(session, "curl -s '#{url}/x'")
        assert_refused(result)
      end

      refute_request(v6)

      open = Session.new(allow_net: [v6.url], block_private_ips: false)
      assert %{exit_code: 0, stdout: "served /six"} = run!(open, "curl -s '#{v6.url}/six'")
      assert_received {:http_request, _, "GET", "/six"}
    end

    test "every IPv4-embedding IPv6 form, by the address it embeds", %{server: server} do
      session = Session.new(allow_net: :all)

      # Each embeds 127.0.0.1 (Teredo: the client address, inverted).
      for host <- [
            "::ffff:0:127.0.0.1",
            "::ffff:0:7f00:1",
            "::ffff:127.0.0.1",
            "::127.0.0.1",
            "64:ff9b::127.0.0.1",
            "2002:7f00:1::1",
            "2001:0:808:808::80ff:fffe"
          ] do
        result = run!(session, "curl -s -m 5 'http://[#{host}]:#{server.port}/x'")
        assert_refused(result)
      end

      refute_request(server)
    end

    test "an allowlisted literal matches its other spellings only once normalized",
         %{server: server} do
      # Matching is on the parsed URL, so a decimal spelling of an
      # allowlisted address is the same URL (and is served when private
      # addresses are allowed).
      session = Session.new(allow_net: [server.url], block_private_ips: false)

      assert %{exit_code: 0, stdout: "served /d"} =
               run!(session, "curl -s http://2130706433:#{server.port}/d")

      assert_received {:http_request, _, "GET", "/d"}
    end
  end

  describe "option validation" do
    test "a malformed pattern raises ArgumentError from new/1" do
      for pattern <- [
            "api.example.com",
            "ftp://example.com",
            "https://user:pw@example.com",
            "https://example.com/?q=1",
            "https://example.com/#top",
            "http://example.com:99999",
            "http://",
            ""
          ] do
        error = assert_raise ArgumentError, fn -> Session.new(allow_net: [pattern]) end
        assert error.message =~ ":allow_net", pattern
      end
    end

    test "other shapes raise too" do
      assert_raise ArgumentError, ~r/:allow_net/, fn -> Session.new(allow_net: "https://a.b") end
      assert_raise ArgumentError, ~r/:allow_net/, fn -> Session.new(allow_net: :none) end
      assert_raise ArgumentError, ~r/:allow_net/, fn -> Session.new(allow_net: [:all]) end

      assert_raise ArgumentError, ~r/:block_private_ips/, fn ->
        Session.new(block_private_ips: "no")
      end
    end
  end
end
