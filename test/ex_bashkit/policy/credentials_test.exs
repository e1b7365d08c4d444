defmodule ExBashkit.Policy.CredentialsTest do
  # `:credentials`, `:egress` and `Result.requests`, against real HTTP
  # servers on 127.0.0.1 that record every request and its headers.
  # (What must never leak, path by path: test/security/credentials_test.exs.)
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.{Result, Session}
  alias ExBashkit.Test.HttpServer

  @token "ghp-test-token-0123456789"

  defmodule GetOnly do
    @moduledoc false
    @behaviour ExBashkit.Egress
    @impl true
    def decide(%{method: method}, allowed), do: if(method in allowed, do: :allow, else: :deny)
  end

  setup do
    %{server: HttpServer.start!()}
  end

  defp session(server, opts) do
    Session.new([allow_net: [server.url], block_private_ips: false] ++ opts)
  end

  defp header(headers, name), do: for({^name, value} <- headers, do: value)

  describe ":credentials injected (the script knows nothing)" do
    test "bearer: the request under the prefix carries Authorization", %{server: server} do
      session = session(server, credentials: [{server.url <> "/api/", bearer: @token}])

      assert out(session, "curl -s #{server.url}/api/user") == "served /api/user"
      assert [headers] = HttpServer.headers(server)
      assert header(headers, "authorization") == ["Bearer " <> @token]
    end

    test "header: and headers: add theirs, replacing the script's own", %{server: server} do
      session =
        session(server,
          credentials: [
            {server.url <> "/one/", header: {"X-Api-Key", "key-1"}},
            {server.url <> "/two/", headers: [{"X-Key", "k-2"}, {"X-Secret", "s-2"}]}
          ]
        )

      ok!(session, "curl -s -H 'X-Api-Key: forged' #{server.url}/one/x")
      ok!(session, "curl -s #{server.url}/two/x")
      assert [one, two] = HttpServer.headers(server)
      assert header(one, "x-api-key") == ["key-1"]
      assert header(two, "x-key") == ["k-2"]
      assert header(two, "x-secret") == ["s-2"]
    end

    test "a request outside the prefix carries none, nor does wget or http inside it",
         %{server: server} do
      session = session(server, credentials: [{server.url <> "/api/", bearer: @token}])

      ok!(session, "curl -s #{server.url}/other")
      ok!(session, "wget -q -O - #{server.url}/api/w")
      ok!(session, "http GET #{server.url}/api/h")
      assert [outside, wget, http] = HttpServer.headers(server)
      assert header(outside, "authorization") == []
      assert header(wget, "authorization") == ["Bearer " <> @token]
      assert header(http, "authorization") == ["Bearer " <> @token]
    end

    test "a prefix outside :allow_net is refused at new/1" do
      message =
        assert_raise ArgumentError, fn ->
          Session.new(
            allow_net: ["https://api.example.com/"],
            credentials: [{"https://api.github.com/", bearer: @token}]
          )
        end

      assert message.message =~ ~s(:credentials prefix "https://api.github.com/" is not within)
      refute message.message =~ @token

      # No :allow_net at all is no network, so no place for a credential.
      assert_raise ArgumentError, ~r/not within :allow_net/, fn ->
        Session.new(credentials: [{"https://api.github.com/", bearer: @token}])
      end
    end

    test "malformed entries are refused, never quoting the secret" do
      for credentials <- [
            [{"https://a.example/", bearer: ""}],
            [{"https://a.example/", bearer: @token <> "\r\nX-Evil: 1"}],
            [{"https://a.example/", bearer: @token, header: {"X", @token}}],
            [{"https://a.example/", header: {"bad name", @token}}],
            [{"https://a.example/", header: @token}],
            [{"https://a.example/", headers: []}],
            [{"https://a.example/", token: @token}],
            [{"https://a.example/", bearer: @token, placeholder: "1BAD"}],
            [
              {"https://a.example/", bearer: @token, placeholder: "K"},
              {"https://a.example/x/", bearer: @token, placeholder: "K"}
            ],
            [{"https://a.example/", [@token]}],
            [@token],
            @token
          ] do
        error =
          assert_raise ArgumentError, fn ->
            Session.new(allow_net: ["https://a.example/"], credentials: credentials)
          end

        refute error.message =~ @token, error.message
        refute error.message =~ "ghp-test"
      end
    end
  end

  describe ":credentials with a placeholder" do
    test "the variable holds a stand-in, replaced on the wire under the prefix only",
         %{server: server} do
      session =
        session(server,
          credentials: [
            {server.url <> "/v1/",
             header: {"authorization", "Bearer " <> @token}, placeholder: "OPENAI_API_KEY"}
          ]
        )

      placeholder = out(session, "printf %s \"$OPENAI_API_KEY\"")
      assert placeholder =~ ~r/\Abk_placeholder_[0-9a-f]{32}\z/

      ok!(session, ~s(curl -s -H "authorization: $OPENAI_API_KEY" #{server.url}/v1/chat))
      ok!(session, ~s(curl -s -H "authorization: $OPENAI_API_KEY" #{server.url}/elsewhere))
      assert [inside, outside] = HttpServer.headers(server)
      assert header(inside, "authorization") == ["Bearer " <> @token]
      assert header(outside, "authorization") == [placeholder]
    end

    test "bearer: the placeholder stands for the token", %{server: server} do
      session =
        session(server, credentials: [{server.url <> "/", bearer: @token, placeholder: "GH"}])

      ok!(session, ~s(curl -s -H "Authorization: Bearer $GH" #{server.url}/x))
      assert [headers] = HttpServer.headers(server)
      assert header(headers, "authorization") == ["Bearer " <> @token]
    end
  end

  describe "a placeholder stays valid" do
    test "across reset/1 and a snapshot restored from another session", %{server: server} do
      opts = [credentials: [{server.url <> "/", bearer: @token, placeholder: "GH"}]]
      session = session(server, opts)
      other = session(server, opts)
      send_it = ~s(curl -s -H "Authorization: Bearer $GH" #{server.url}/x)

      :ok = Session.reset(session)
      ok!(session, send_it)
      {:ok, snapshot} = Session.snapshot(other)
      {:ok, _} = Session.restore(session, snapshot)
      ok!(session, send_it)

      for headers <- HttpServer.headers(server) do
        assert header(headers, "authorization") == ["Bearer " <> @token]
      end

      assert length(HttpServer.headers(server)) == 2
    end
  end

  describe "redirects" do
    setup %{server: target} do
      bouncer =
        HttpServer.start!(
          handler: fn
            _method, "/api/go/" <> where -> {302, [{"location", URI.decode(where)}], "moved"}
            _method, path -> {200, [], "served " <> path}
          end
        )

      %{bouncer: bouncer, target: target}
    end

    test "never carry a credential to another prefix, injected or placeholder",
         %{bouncer: bouncer, target: target} do
      session =
        Session.new(
          allow_net: [bouncer.url, target.url],
          block_private_ips: false,
          credentials: [
            {bouncer.url <> "/api/", bearer: @token},
            {bouncer.url <> "/api/", header: {"x-key", "key-" <> @token}, placeholder: "KEY"}
          ]
        )

      for to <- [target.url <> "/landed", bouncer.url <> "/outside"] do
        hop = URI.encode_www_form(to)

        ok!(
          session,
          ~s(curl -s -L -H "x-key: $KEY" -H "Authorization: Bearer $KEY" #{bouncer.url}/api/go/#{hop})
        )
      end

      # Bouncer: both /api/go hops, then /outside; target: /landed.
      assert [go1, go2, outside] = HttpServer.headers(bouncer)
      assert header(go1, "authorization") == ["Bearer " <> @token]
      assert header(go2, "x-key") == ["key-" <> @token]

      for headers <- [outside | HttpServer.headers(target)], {_name, value} <- headers do
        refute value =~ @token
      end
    end
  end

  describe ":egress" do
    test "is asked for each admitted request, with credentials redacted", %{server: server} do
      test = self()

      session =
        session(server,
          credentials: [{server.url <> "/", bearer: @token}],
          egress: fn request ->
            send(test, {:asked, request})
            if request.url =~ "/yes", do: :allow, else: :deny
          end
        )

      assert out(session, "curl -s #{server.url}/yes") == "served /yes"
      result = run!(session, "curl -s -w ' %{http_code}' #{server.url}/no")
      assert result.stdout == "Not Found\n 404"

      assert_received {:asked, %{method: "GET", url: url, headers: headers}}
      assert url == server.url <> "/yes"
      assert {"Authorization", "Bearer [REDACTED]"} in headers
      assert_received {:asked, %{url: no}}
      assert no == server.url <> "/no"
      assert HttpServer.requests(server) == ["GET /yes HTTP/1.1"]
    end

    test "is not asked for what :allow_net refused", %{server: server} do
      test = self()
      session = session(server, egress: fn r -> send(test, {:asked, r}) && :allow end)
      run!(session, "curl -s http://127.0.0.2:1/x; curl -s https://example.com/")
      refute_received {:asked, _}
    end

    test "{module, arg}, a crash, a timeout and any answer but :allow deny", %{server: server} do
      module = session(server, egress: {GetOnly, ["GET"]})
      assert out(module, "curl -s #{server.url}/get") == "served /get"
      assert out(module, "curl -s -X POST #{server.url}/post") == "Not Found\n"

      for egress <- [
            fn _ -> raise "boom" end,
            fn _ -> Process.sleep(:infinity) end,
            fn _ -> true end,
            fn _ -> exit(:kill) end
          ] do
        denied = session(server, egress: egress, builtin_timeout_ms: 200)
        assert out(denied, "curl -s #{server.url}/denied") == "Not Found\n"
      end

      assert HttpServer.requests(server) == ["GET /get HTTP/1.1"]

      assert_raise ArgumentError, ~r/:egress/, fn -> Session.new(egress: :nope) end
      assert_raise ArgumentError, ~r/decide\/2/, fn -> Session.new(egress: {String, 1}) end
    end
  end

  describe "Result.requests" do
    test "lists each request in order: method, url, status, decision, bytes",
         %{server: server} do
      closed = "http://127.0.0.1:1"

      session =
        Session.new(
          allow_net: [server.url <> "/", closed],
          block_private_ips: false,
          egress: fn r -> if r.url =~ "/deny", do: :deny, else: :allow end
        )

      script = """
      curl -s #{server.url}/a
      curl -s -X POST -d 'x=1' #{server.url}/b
      curl -s #{server.url}/deny
      curl -s #{closed}/gone
      curl -s https://unlisted.example/
      """

      %Result{requests: requests} = run!(session, script)

      assert requests == [
               %{method: "GET", url: server.url <> "/a", status: 200, decision: :allow, bytes: 9},
               %{
                 method: "POST",
                 url: server.url <> "/b",
                 status: 200,
                 decision: :allow,
                 bytes: 9
               },
               %{
                 method: "GET",
                 url: server.url <> "/deny",
                 status: nil,
                 decision: :deny,
                 bytes: 0
               },
               %{method: "GET", url: closed <> "/gone", status: nil, decision: :allow, bytes: 0},
               %{
                 method: "GET",
                 url: "https://unlisted.example/",
                 status: nil,
                 decision: :deny,
                 bytes: 0
               }
             ]

      # Each exec lists its own; a reset keeps recording.
      assert run!(session, "echo quiet").requests == []
      :ok = Session.reset(session)
      assert [%{url: url}] = run!(session, "curl -s #{server.url}/after").requests
      assert url == server.url <> "/after"
    end

    test "each redirect hop is a request of its own", %{server: server} do
      bouncer =
        HttpServer.start!(
          handler: fn _, "/go" -> {302, [{"location", server.url <> "/to"}], ""} end
        )

      session = Session.new(allow_net: [bouncer.url, server.url], block_private_ips: false)

      assert [%{url: go, status: 302}, %{url: to, status: 200}] =
               run!(session, "curl -s -L #{bouncer.url}/go").requests

      assert {go, to} == {bouncer.url <> "/go", server.url <> "/to"}
    end
  end
end
