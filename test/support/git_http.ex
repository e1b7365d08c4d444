defmodule ExBashkit.Test.GitHttp do
  @moduledoc false
  # Bare git repositories served over the git smart HTTP protocol on
  # 127.0.0.1, for the git remote tests: the host's `git http-backend` (a
  # CGI program shipped with git) behind a tiny HTTP/1.1 server. Real
  # sockets, the real protocol: the host's own `git clone` works against it.
  #
  # Every request is reported to the owner as
  # `{:git_http_request, server_pid, method, path}`, so a test can prove that
  # no request was made. Each connection answers one request and closes; the
  # server stops with the test (it is started supervised).

  @doc """
  A bare repository `name.git` under a fresh directory, holding one commit
  of `files` (`%{"path" => content}`), made by the host's git with a fixed
  identity and no user or system configuration. Returns the directory
  (the project root to serve).
  """
  def bare_repo!(name, files) do
    root = ExBashkit.Test.HostDir.create!()
    work = Path.join(root, "work")
    ExBashkit.Test.HostDir.populate!(work, files)
    git!(work, ["init", "-q", "-b", "main"])
    git!(work, ["add", "."])

    git!(
      work,
      ["-c", "user.name=Origin", "-c", "user.email=origin@example.com"] ++
        ["commit", "-q", "-m", "initial"]
    )

    git!(root, ["clone", "-q", "--bare", work, "#{name}.git"])
    File.rm_rf!(work)
    root
  end

  @doc "Run the host's git in `dir`, isolated from the user's configuration."
  def git!(dir, args) do
    case System.cmd(git(), args, cd: dir, env: isolated_env(dir), stderr_to_stdout: true) do
      {out, 0} -> out
      {out, code} -> raise "git #{Enum.join(args, " ")} failed (#{code}): #{out}"
    end
  end

  @doc "Serve the repositories under `root`; returns `%{pid, port, url}`."
  def start!(root) do
    opts = [root: root, owner: self()]
    pid = ExUnit.Callbacks.start_supervised!({__MODULE__, opts}, id: make_ref())

    receive do
      {:git_http_listening, ^pid, port} ->
        %{pid: pid, port: port, url: "http://127.0.0.1:#{port}"}
    after
      5_000 -> raise "git HTTP server did not start"
    end
  end

  @doc false
  def child_spec(opts) do
    %{id: __MODULE__, start: {__MODULE__, :start_link, [opts]}, restart: :temporary}
  end

  @doc false
  def start_link(opts), do: {:ok, spawn_link(fn -> listen(opts) end)}

  defp git, do: System.find_executable("git") || raise("git is not installed (scripts/setup)")

  defp isolated_env(dir) do
    [
      {"HOME", dir},
      {"XDG_CONFIG_HOME", dir},
      {"GIT_CONFIG_NOSYSTEM", "1"},
      {"GIT_TERMINAL_PROMPT", "0"}
    ]
  end

  defp listen(opts) do
    {:ok, socket} =
      :gen_tcp.listen(0, [
        :binary,
        ip: {127, 0, 0, 1},
        packet: :http_bin,
        active: false,
        reuseaddr: true
      ])

    {:ok, port} = :inet.port(socket)
    send(opts[:owner], {:git_http_listening, self(), port})
    accept(socket, opts)
  end

  defp accept(socket, opts) do
    {:ok, conn} = :gen_tcp.accept(socket)
    server = self()
    pid = spawn(fn -> serve(conn, server, opts) end)
    :ok = :gen_tcp.controlling_process(conn, pid)
    send(pid, :go)
    accept(socket, opts)
  end

  defp serve(conn, server, opts) do
    receive do
      :go -> :ok
    end

    with {:ok, {:http_request, method, {:abs_path, target}, _}} <- :gen_tcp.recv(conn, 0, 5_000),
         {:ok, headers} <- headers(conn, %{}),
         :ok <- :inet.setopts(conn, packet: :raw),
         {:ok, body} <- body(conn, headers) do
      method = to_string(method)
      send(opts[:owner], {:git_http_request, server, method, target})
      :gen_tcp.send(conn, cgi(method, target, headers, body, opts[:root]))
    end

    :gen_tcp.close(conn)
  end

  defp headers(conn, acc) do
    case :gen_tcp.recv(conn, 0, 5_000) do
      {:ok, :http_eoh} ->
        {:ok, acc}

      {:ok, {:http_header, _, name, _, value}} ->
        headers(conn, Map.put(acc, String.downcase(to_string(name)), value))

      other ->
        {:error, other}
    end
  end

  defp body(conn, headers) do
    cond do
      headers["transfer-encoding"] == "chunked" -> chunks(conn, [])
      (length = headers["content-length"]) != nil -> recv_exactly(conn, String.to_integer(length))
      true -> {:ok, ""}
    end
  end

  defp recv_exactly(_conn, 0), do: {:ok, ""}
  defp recv_exactly(conn, n), do: :gen_tcp.recv(conn, n, 5_000)

  defp chunks(conn, acc) do
    :ok = :inet.setopts(conn, packet: :line)
    {:ok, line} = :gen_tcp.recv(conn, 0, 5_000)
    size = line |> String.trim() |> String.split(";") |> hd() |> String.to_integer(16)
    :ok = :inet.setopts(conn, packet: :raw)

    if size == 0 do
      :ok = :inet.setopts(conn, packet: :line)
      {:ok, _} = :gen_tcp.recv(conn, 0, 5_000)
      {:ok, IO.iodata_to_binary(Enum.reverse(acc))}
    else
      {:ok, data} = :gen_tcp.recv(conn, size, 5_000)
      {:ok, _crlf} = :gen_tcp.recv(conn, 2, 5_000)
      chunks(conn, [data | acc])
    end
  end

  # Run `git http-backend` as a CGI program: request in the environment and
  # on stdin (a file: a port cannot close a program's stdin), response on
  # stdout as CGI headers, a blank line and the body.
  defp cgi(method, target, headers, body, root) do
    {path, query} =
      case String.split(target, "?", parts: 2) do
        [path, query] -> {path, query}
        [path] -> {path, ""}
      end

    input = Path.join(root, ".request-#{System.unique_integer([:positive])}")
    File.write!(input, body)

    env =
      [
        {"GIT_PROJECT_ROOT", root},
        {"GIT_HTTP_EXPORT_ALL", "1"},
        {"REQUEST_METHOD", method},
        {"PATH_INFO", URI.decode(path)},
        {"QUERY_STRING", query},
        {"CONTENT_TYPE", headers["content-type"] || ""},
        {"CONTENT_LENGTH", Integer.to_string(byte_size(body))},
        {"HTTP_CONTENT_ENCODING", headers["content-encoding"] || ""},
        {"HTTP_GIT_PROTOCOL", headers["git-protocol"] || ""},
        {"REMOTE_ADDR", "127.0.0.1"}
      ] ++ isolated_env(root)

    {out, _} =
      System.cmd("sh", ["-c", "exec \"$0\" http-backend < \"$1\"", git(), input], env: env)

    File.rm(input)
    {head, payload} = split_cgi(out)

    {status, fields} =
      head
      |> String.split(["\r\n", "\n"], trim: true)
      |> Enum.map(&(String.split(&1, ":", parts: 2) |> Enum.map(fn p -> String.trim(p) end)))
      |> Enum.split_with(fn [name | _] -> String.downcase(name) == "status" end)

    status =
      case status do
        [[_, value]] -> value
        [] -> "200 OK"
      end

    [
      "HTTP/1.1 #{status}\r\n",
      for([name, value] <- fields, do: "#{name}: #{value}\r\n"),
      "Content-Length: #{byte_size(payload)}\r\nConnection: close\r\n\r\n",
      payload
    ]
  end

  defp split_cgi(out) do
    case :binary.match(out, "\r\n\r\n") do
      {at, 4} ->
        {binary_part(out, 0, at), binary_part(out, at + 4, byte_size(out) - at - 4)}

      :nomatch ->
        [head, payload] = String.split(out, "\n\n", parts: 2)
        {head, payload}
    end
  end
end
