defmodule ExBashkit.Security.CredentialsTest do
  # A `:credentials` secret never reaches the session or anything that
  # reports on it: each leak path, tried (a row each in SECURITY.md). The
  # servers are real, on 127.0.0.1, and record the headers they get.
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.{Pool, Sandbox, Server, Session, Tool}
  alias ExBashkit.Test.HttpServer

  @secret "sk-live-5ecret-0f-the-h0st"
  @header_secret "hdr-5ecret-0f-the-h0st"

  setup do
    # A server that answers with what it was sent: a script must not get
    # the secret back this way either.
    echo =
      HttpServer.start!(
        handler: fn _method, _path, headers ->
          sent = Enum.map_join(headers, "\n", fn {k, v} -> "#{k}: #{v}" end)
          {200, [{"x-echo", inspect(headers)}], sent}
        end
      )

    %{echo: echo, opts: options(echo)}
  end

  defp options(server) do
    [
      allow_net: [server.url],
      block_private_ips: false,
      credentials: [
        {server.url <> "/api/", bearer: @secret},
        {server.url <> "/key/", header: {"x-api-key", @header_secret}, placeholder: "API_KEY"}
      ]
    ]
  end

  defp refute_secret(text) when is_binary(text) do
    refute text =~ @secret
    refute text =~ @header_secret
  end

  defp refute_secret(term),
    do: refute_secret(inspect(term, limit: :infinity, printable_limit: :infinity))

  # A session that used both credentials once.
  defp used(opts) do
    session = Session.new(opts)
    ok!(session, "curl -s #{opts[:allow_net] |> hd()}/api/x > /tmp/api.txt")

    ok!(
      session,
      ~s(curl -s -H "x-api-key: $API_KEY" #{opts[:allow_net] |> hd()}/key/y > /tmp/key)
    )

    session
  end

  test "both reach the server", %{echo: echo, opts: opts} do
    used(opts)
    assert [api, key] = HttpServer.headers(echo)
    assert {"authorization", "Bearer " <> @secret} in api
    assert {"x-api-key", @header_secret} in key
  end

  test "not in the environment: env, printenv, set, declare, export", %{opts: opts} do
    session = used(opts)

    for script <- ["env", "printenv", "set", "declare -p", "export -p", "echo $API_KEY"] do
      refute_secret(out(session, script))
    end

    assert out(session, "printf %s \"$API_KEY\"") =~ ~r/\Abk_placeholder_/
  end

  test "not in any file, nor in /proc", %{opts: opts} do
    session = used(opts)
    files = out(session, "find / -type f 2>/dev/null")
    refute files == ""
    refute_secret(out(session, "find / -type f -exec cat {} + 2>/dev/null"))
    refute_secret(out(session, "cat /proc/self/environ /proc/self/cmdline /proc/1/environ 2>&1"))
    refute_secret(out(session, "ls -laR /proc 2>&1"))
  end

  test "answers that echo it back have it redacted, body and headers", %{opts: opts} do
    session = used(opts)
    body = out(session, "cat /tmp/api.txt /tmp/key")
    assert body =~ "authorization: Bearer [REDACTED]"
    assert body =~ "x-api-key: [REDACTED]"
    refute_secret(out(session, "curl -s -i #{hd(opts[:allow_net])}/api/again"))
  end

  test "not in state/1, snapshots, export_tar or git commits", %{opts: opts} do
    session = used(opts ++ [git: true])
    refute_secret(Session.state(session))

    ok!(session, "cd /tmp && git init -q && git add . && git commit -q -m m && git log -p")
    {:ok, snapshot} = Session.snapshot(session)
    refute_secret(snapshot)
    {:ok, tar} = Session.export_tar(session, "/")
    refute_secret(tar)
    refute_secret(out(session, "cd /tmp && git log -p && git cat-file -p HEAD"))
  end

  test "not in results or errors", %{opts: opts} do
    session = used(opts)
    result = run!(session, "curl -s -v #{hd(opts[:allow_net])}/api/v 2>&1")
    refute_secret(result)
    assert [%{decision: :allow, status: 200}] = result.requests

    {:error, error} =
      Session.run(session, "curl -s #{hd(opts[:allow_net])}/api/t; sleep 5", timeout_ms: 300)

    refute_secret(error)
    refute_secret(Exception.message(error))
  end

  test "the :egress callback sees it redacted", %{opts: opts} do
    test = self()
    session = used(opts ++ [egress: fn request -> send(test, {:asked, request}) && :allow end])
    run!(session, "curl -s #{hd(opts[:allow_net])}/api/z")
    assert_received {:asked, first}
    assert_received {:asked, second}
    assert_received {:asked, third}
    refute_secret([first, second, third])
    assert {"Authorization", "Bearer [REDACTED]"} in first.headers
    assert {"x-api-key", "[REDACTED]"} in second.headers
  end

  test "not in inspect/1 of a Session, a Sandbox, a Server or a Pool, their state or specs",
       %{opts: opts} do
    session = used(opts)
    refute_secret(session)

    {:ok, sandbox} = Sandbox.init(opts)
    refute_secret(sandbox)

    assert {:ok, %{output: output}} =
             Sandbox.exec(sandbox, "curl -s #{hd(opts[:allow_net])}/api/s")

    refute_secret(output)

    {:ok, server} = Server.start_link(opts)
    refute_secret(server)
    refute_secret(:sys.get_state(server))
    refute_secret(Server.child_spec(opts))

    {:ok, pool} = Pool.start_link(name: nil, size: 1, session: opts)
    refute_secret(:sys.get_state(pool))
    refute_secret(Pool.child_spec(session: opts))
    assert {:ok, _} = Pool.exec(pool, "curl -s #{hd(opts[:allow_net])}/api/p")
  end

  test "a worker's owner keeps it sealed", %{opts: opts} do
    %Session{location: {:process, name, _sid}} = session = used(opts ++ [isolation: :process])
    refute_secret(:sys.get_state(GenServer.whereis(name)))
    # Held to here: a session's process stops with it.
    assert Session.info(session).isolation == :process
  end

  # A crash report of a GenServer logs its status (`format_status/1`'s view
  # of the state, the last message, the reason): `:sys.get_status/1` is
  # that status, without waiting on a logger.
  test "not in what a crashing server, pool or worker owner would log", %{opts: opts} do
    {:ok, server} = Server.start_link(opts)
    {:ok, pool} = Pool.start_link(name: nil, size: 1, session: opts)
    %Session{location: {:process, name, _}} = session = used(opts ++ [isolation: :process])
    Process.put(:held_session, session)

    for pid <- [server, pool, GenServer.whereis(name)] do
      status = :sys.get_status(pid)
      refute_secret(status)
      # The formatted text too, as a log handler would print it.
      refute_secret(Exception.format_exit({:boom, status}))
    end

    assert inspect(:sys.get_status(server)) =~ "#Function<"
  end

  test "not in the Tool's texts", %{opts: opts} do
    session = used(opts)
    prompt = Tool.system_prompt(session)
    assert prompt =~ "Authenticated URLs"
    assert prompt =~ "$API_KEY"
    refute_secret(prompt)
    refute_secret(Tool.definition(session))

    refute_secret(
      Tool.call(session, %{"commands" => "env; curl -s #{hd(opts[:allow_net])}/api/c"})
    )
  end

  test "redirects never carry it to another origin or prefix", %{echo: echo, opts: opts} do
    outside = HttpServer.start!()

    bouncer =
      HttpServer.start!(
        handler: fn _method, "/api/go/" <> where ->
          {302, [{"location", URI.decode(where)}], ""}
        end
      )

    opts =
      Keyword.merge(opts,
        allow_net: [bouncer.url, echo.url, outside.url],
        credentials: [
          {bouncer.url <> "/api/", bearer: @secret},
          {bouncer.url <> "/api/", header: {"x-api-key", @header_secret}, placeholder: "API_KEY"}
        ]
      )

    session = Session.new(opts)

    for to <- [outside.url <> "/elsewhere", echo.url <> "/api/same-path-other-origin"] do
      hop = URI.encode_www_form(to)
      ok!(session, ~s(curl -s -L -H "x-api-key: $API_KEY" #{bouncer.url}/api/go/#{hop}))
    end

    assert [first, _] = HttpServer.headers(bouncer)
    assert {"authorization", "Bearer " <> @secret} in first
    refute_secret(HttpServer.headers(outside) ++ HttpServer.headers(echo))
  end
end
