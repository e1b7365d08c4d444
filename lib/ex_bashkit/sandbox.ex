defmodule ExBashkit.Sandbox do
  @moduledoc """
  A sandbox backend for agent frameworks, with the callbacks of
  [Condukt](https://hex.pm/packages/condukt)'s `Condukt.Sandbox` behaviour:
  read, write and edit files, run commands, glob, grep and mount host
  directories, all inside one `ExBashkit.Session`.

  The module has no dependency on Condukt: it declares
  `@behaviour Condukt.Sandbox` only when that module is loaded, and the
  callbacks are plain functions any framework can call.

  ## With Condukt

      # An agent whose tools (Read, Write, Edit, Bash, Glob, Grep) all run
      # in a virtual shell, with the project mounted read-only at /workspace:
      {:ok, agent} =
        MyApp.CodingAgent.start_link(
          api_key: "...",
          sandbox:
            {ExBashkit.Sandbox,
             mounts: [{File.cwd!(), "/workspace", :readonly}],
             cwd: "/workspace",
             limits: [max_commands: 100_000]}
        )

      # Or directly through Condukt's facade:
      {:ok, sandbox} = Condukt.Sandbox.new(ExBashkit.Sandbox, cwd: "/work")
      :ok = Condukt.Sandbox.write(sandbox, "hello.sh", "echo hello\\n")
      {:ok, %{output: "hello\\n", exit_code: 0}} = Condukt.Sandbox.exec(sandbox, "bash hello.sh")

  ## Options of `init/1`

    * `:mounts` - host directories, as Condukt writes them:
      `{host_path, vfs_path, :readonly | :readwrite}` or `{host_path,
      vfs_path}` (read-write). `ExBashkit.Session`'s own form,
      `{vfs_path, host_path, :read_only | :read_write}`, is accepted too (the
      mode tells them apart). A relative host path is expanded on the host.
    * `:cwd` - the base directory: where commands start and what relative
      paths resolve against (default `/`, the session's default); created if
      missing.
    * `:persistent` - `false` (default, Condukt's contract): every `exec/3`
      starts from the shell state the sandbox began with (cwd, variables,
      functions, aliases), while files persist. `true`: shell state carries
      from one call to the next, as in an `ExBashkit.Session`.
    * `:mount_mode` - the mode of `mount/3` mounts: `:read_write` (default,
      the mode Condukt's own Virtual sandbox mounts in) or `:read_only`
      (scripts then cannot change the host directory).
    * every other option goes to `ExBashkit.Session.new/1` (`:limits`,
      `:files`, `:env`, `:allow_net`, `:builtins`, `:virtual_fs`, `:python`,
      `:git`, `:sqlite`, `:typescript`, ...). When
      `:limits` has no `:timeout_ms`, the session's own wall-clock limit is
      lifted to 24 hours so that `exec/3`'s `:timeout` governs.

  `init/1` never raises: a bad option is `{:error, message}`.

  ## Paths

  Relative paths (in `read_file/2`, `write_file/3`, `edit_file/4`, the
  `:cwd` of `exec/3` and `glob/3`, the `:path` of `grep/3`, the `vfs_path`
  of `mount/3`) resolve against the base cwd; `..` never climbs above `/`.
  The filesystem is the session's: in-memory files, host mounts,
  `:virtual_fs` backends.

  ## Concurrency

  Calls on one sandbox run one at a time, in arrival order. With
  `persistent: false` the shell-state reset and the command are two steps:
  two processes calling `exec/3` on one sandbox at the same moment may see
  each other's `cd`/`export` (files are shared either way). Condukt calls a
  sandbox's tools one at a time; give concurrent callers a sandbox each.

  ## Errors

  `read_file/2` and `edit_file/4` return `{:error, :enoent}` for a missing
  file and `{:error, :eisdir}` for a directory, as `File` does (Condukt's
  tools turn those into friendly messages); other failures are
  `{:error, message}`. `grep/3` returns `{:error, {:invalid_regex, message,
  nil}}` for a pattern Rust's `regex` crate rejects.
  """

  if Code.ensure_loaded?(Condukt.Sandbox), do: @behaviour(Condukt.Sandbox)

  alias ExBashkit.{Search, Session}
  alias ExBashkit.Session.VfsPath

  @default_exec_timeout_ms 120_000
  @default_grep_limit 1_000
  @lifted_session_timeout_ms 24 * 60 * 60 * 1000
  @sandbox_options [:mounts, :cwd, :persistent, :mount_mode]

  @enforce_keys [:session, :base_cwd, :persistent]
  defstruct [
    :session,
    :base_cwd,
    :persistent,
    :baseline,
    mount_mode: :read_write,
    session_timeout_ms: @lifted_session_timeout_ms
  ]

  @typedoc "The sandbox state `init/1` returns."
  @opaque t :: %__MODULE__{
            session: Session.t(),
            base_cwd: String.t(),
            persistent: boolean(),
            baseline: binary() | nil,
            mount_mode: Session.mount_mode(),
            session_timeout_ms: pos_integer()
          }

  @doc """
  Build a sandbox: `{:ok, state}` or `{:error, message}` (never raises).

  See the module doc for the options.

  ## Examples

      iex> {:ok, sandbox} = ExBashkit.Sandbox.init(cwd: "/work")
      iex> ExBashkit.Sandbox.cwd(sandbox)
      "/work"
      iex> {:error, _} = ExBashkit.Sandbox.init(mounts: [{"/no/such/dir", "/w", :readonly}])
      iex> {:error, _} = ExBashkit.Sandbox.init(persistent: :maybe)
  """
  @spec init(keyword()) :: {:ok, t()} | {:error, String.t()}
  def init(opts) do
    with {:ok, opts} <- keyword(opts),
         {:ok, mounts} <- mounts(Keyword.get(opts, :mounts, [])),
         {:ok, cwd} <- base_cwd(Keyword.get(opts, :cwd, "/")),
         {:ok, persistent} <- boolean(Keyword.get(opts, :persistent, false), :persistent),
         {:ok, mount_mode} <- mount_mode(Keyword.get(opts, :mount_mode, :read_write)),
         {:ok, limits, session_timeout} <- limits(Keyword.get(opts, :limits, [])),
         session_opts =
           opts
           |> Keyword.drop(@sandbox_options ++ [:limits])
           |> Keyword.merge(mounts: mounts, cwd: cwd, limits: limits),
         {:ok, session} <- new_session(session_opts),
         {:ok, baseline} <- baseline(session, persistent) do
      {:ok,
       %__MODULE__{
         session: session,
         base_cwd: cwd,
         persistent: persistent,
         baseline: baseline,
         mount_mode: mount_mode,
         session_timeout_ms: session_timeout
       }}
    end
  end

  @doc """
  Release the sandbox: stops a running command. The session itself is freed
  when the state is garbage-collected. Always `:ok`.
  """
  @spec shutdown(t()) :: :ok
  def shutdown(%__MODULE__{session: session}) do
    _ = Session.cancel(session)
    :ok
  end

  @doc "The base working directory."
  @spec cwd(t()) :: String.t()
  def cwd(%__MODULE__{base_cwd: cwd}), do: cwd

  @doc """
  The `ExBashkit.Session` behind the sandbox, for anything the callbacks do
  not cover (`ExBashkit.Session.snapshot/2`, `ExBashkit.Tool.call/2`, ...).
  """
  @spec session(t()) :: Session.t()
  def session(%__MODULE__{session: session}), do: session

  @doc """
  Run `command` and return its output: `{:ok, %{output: binary, exit_code:
  integer}}`, `output` being stdout and stderr merged in the order the
  commands wrote them.

  Options:

    * `:cwd` - the directory to run in (relative to the base cwd).
    * `:env` - extra environment variables, a map or a list of `{name,
      value}` pairs (names must be shell identifiers).
    * `:timeout` - milliseconds (default 120 000). Past it:
      `{:error, :timeout}`, and the sandbox stays usable.

  Any other option is `{:error, message}` naming the valid ones (a
  misspelt `:timeout_ms` would otherwise be ignored silently).

  With `persistent: false` (the default) every call starts from the shell
  state `init/1` built: a `cd`, `export`, function or alias does not reach
  the next call, files do. With `persistent: true` they carry over,
  including the `cd` and `export`s that `:cwd` and `:env` apply.

  A script that cannot run (a syntax error, a resource limit) is
  `{:error, message}`.

  ## Examples

      iex> {:ok, sandbox} = ExBashkit.Sandbox.init([])
      iex> ExBashkit.Sandbox.exec(sandbox, "echo out; echo err >&2; exit 3", [])
      {:ok, %{output: "out\\nerr\\n", exit_code: 3}}
      iex> ExBashkit.Sandbox.exec(sandbox, "echo $GREETING", env: %{"GREETING" => "hi"})
      {:ok, %{output: "hi\\n", exit_code: 0}}
  """
  @spec exec(t(), String.t(), keyword()) ::
          {:ok, %{output: binary(), exit_code: integer()}}
          | {:error, :timeout | String.t()}
  def exec(%__MODULE__{} = state, command, opts \\ []) do
    with {:ok, command} <- script(command),
         {:ok, opts} <- keyword(opts),
         :ok <- known(opts, [:cwd, :env, :timeout], "exec/3"),
         {:ok, timeout} <- timeout(Keyword.get(opts, :timeout)),
         {:ok, preamble} <- preamble(state, opts),
         :ok <- reset_shell(state) do
      run(state, preamble <> command, timeout)
    end
  end

  defp run(state, script, timeout) do
    tag = make_ref()
    outcome = Session.run(state.session, script, timeout_ms: timeout, stream_to: {self(), tag})

    # Every chunk is in the mailbox once exec returned: the chunks were
    # forwarded by this very process while it waited.
    output = drain(tag, [])

    case outcome do
      {:ok, result} ->
        {:ok, %{output: output, exit_code: result.exit_code}}

      # A deadline, ours or the session's: Condukt's `{:error, :timeout}`.
      {:error, %ExBashkit.Error{reason: :timeout}} ->
        {:error, :timeout}

      # Condukt's contract is a message.
      {:error, %ExBashkit.Error{message: message}} ->
        {:error, message}
    end
  end

  defp drain(tag, acc) do
    receive do
      {^tag, {_stream, chunk}} -> drain(tag, [acc | chunk])
    after
      0 -> IO.iodata_to_binary(acc)
    end
  end

  @doc """
  The contents of file `path`: `{:ok, binary}`, `{:error, :enoent}`,
  `{:error, :eisdir}` or `{:error, message}`.

  ## Examples

      iex> {:ok, sandbox} = ExBashkit.Sandbox.init(cwd: "/w", files: %{"/w/a.txt" => "A"})
      iex> ExBashkit.Sandbox.read_file(sandbox, "a.txt")
      {:ok, "A"}
      iex> ExBashkit.Sandbox.read_file(sandbox, "missing.txt")
      {:error, :enoent}
  """
  @spec read_file(t(), String.t()) :: {:ok, binary()} | {:error, atom() | String.t()}
  def read_file(%__MODULE__{session: session} = state, path) do
    with {:ok, path} <- resolve(state, path) do
      case Session.read_file(session, path) do
        {:ok, content} -> {:ok, content}
        {:error, message} -> {:error, fs_reason(session, path, message)}
      end
    end
  end

  @doc """
  Write `content` to `path`, creating parent directories: `:ok` or
  `{:error, reason}`.

  ## Examples

      iex> {:ok, sandbox} = ExBashkit.Sandbox.init([])
      iex> ExBashkit.Sandbox.write_file(sandbox, "/deep/er/f.txt", "x")
      :ok
  """
  @spec write_file(t(), String.t(), binary()) :: :ok | {:error, atom() | String.t()}
  def write_file(%__MODULE__{session: session} = state, path, content) when is_binary(content) do
    with {:ok, path} <- resolve(state, path) do
      case Session.write_file(session, path, content) do
        :ok -> :ok
        {:error, message} -> {:error, write_reason(session, path, message)}
      end
    end
  end

  def write_file(%__MODULE__{}, _path, content),
    do: {:error, "content must be a binary, got: #{inspect(content)}"}

  @doc """
  Replace `old_text` in `path` with `new_text` when it occurs exactly once.

  Returns `{:ok, %{occurrences: n, content: content}}` with `n` the count
  before the edit: for `1` the file was written and `content` is the new
  text; for `0` or more than `1` nothing was written and `content` is the
  file as it is. An empty `old_text` occurs `0` times.

  ## Examples

      iex> {:ok, sandbox} = ExBashkit.Sandbox.init(files: %{"/f.txt" => "a b a"})
      iex> ExBashkit.Sandbox.edit_file(sandbox, "/f.txt", "b", "B")
      {:ok, %{occurrences: 1, content: "a B a"}}
      iex> ExBashkit.Sandbox.edit_file(sandbox, "/f.txt", "a", "A")
      {:ok, %{occurrences: 2, content: "a B a"}}
  """
  @spec edit_file(t(), String.t(), binary(), binary()) ::
          {:ok, %{occurrences: non_neg_integer(), content: binary()}}
          | {:error, atom() | String.t()}
  def edit_file(%__MODULE__{} = state, path, old_text, new_text)
      when is_binary(old_text) and is_binary(new_text) do
    with {:ok, content} <- read_file(state, path) do
      case ExBashkit.Tool.Files.replace_once(content, old_text, new_text) do
        {:ok, edited} ->
          with :ok <- write_file(state, path, edited),
               do: {:ok, %{occurrences: 1, content: edited}}

        {:count, n} ->
          {:ok, %{occurrences: n, content: content}}
      end
    end
  end

  def edit_file(%__MODULE__{}, _path, _old, _new),
    do: {:error, "old_text and new_text must be binaries"}

  @doc """
  Paths matching the glob `pattern`, sorted, relative to the base cwd (or
  to `:cwd`); an absolute `pattern` (without `:cwd`) gives absolute paths.
  `**` matches any number of directories; dot files match.
  See `ExBashkit.Search.glob/3` for the syntax and bounds.

  Options: `:cwd` (relative to the base cwd), `:limit`.

  ## Examples

      iex> {:ok, sandbox} = ExBashkit.Sandbox.init(cwd: "/p", files: %{"/p/a.ex" => "", "/p/lib/b.ex" => ""})
      iex> ExBashkit.Sandbox.glob(sandbox, "**/*.ex", [])
      {:ok, ["a.ex", "lib/b.ex"]}
      iex> ExBashkit.Sandbox.glob(sandbox, "/p/lib/*.ex", [])
      {:ok, ["/p/lib/b.ex"]}
  """
  @spec glob(t(), String.t(), keyword()) :: {:ok, [String.t()]} | {:error, String.t()}
  def glob(%__MODULE__{session: session} = state, pattern, opts \\ []) when is_binary(pattern) do
    with {:ok, opts} <- keyword(opts),
         {:ok, cwd} <- glob_cwd(state, pattern, Keyword.get(opts, :cwd)),
         {:ok, limit} <- limit(Keyword.get(opts, :limit)) do
      guarded(fn -> Search.glob(session, pattern, cwd: cwd, limit: limit) end)
    end
  end

  @doc """
  Lines matching the regex `pattern` (Rust `regex` crate syntax) in the
  files under `:path`: `{:ok, [%{path:, line_number:, line:}]}` with paths
  relative to the base cwd's `:path` when it is relative (or absent),
  absolute when `:path` is absolute. See `ExBashkit.Search.grep/3` for what is skipped and
  how the work is bounded.

  Options: `:path` (default the base cwd), `:glob` (a file-name glob such
  as `"*.ex"`, or a path glob such as `"lib/**/*.ex"`), `:case_sensitive`
  (default `true`), `:limit` (default 1 000).

  ## Examples

      iex> {:ok, sandbox} = ExBashkit.Sandbox.init(files: %{"/src/a.ex" => "def x\\nDEF y\\n"})
      iex> ExBashkit.Sandbox.grep(sandbox, "def", path: "/src", case_sensitive: false)
      {:ok, [%{path: "/src/a.ex", line_number: 1, line: "def x"}, %{path: "/src/a.ex", line_number: 2, line: "DEF y"}]}
  """
  @spec grep(t(), String.t(), keyword()) ::
          {:ok, [Search.match()]} | {:error, String.t() | {:invalid_regex, String.t(), nil}}
  def grep(%__MODULE__{session: session} = state, pattern, opts \\ []) when is_binary(pattern) do
    with {:ok, opts} <- keyword(opts),
         {:ok, path} <- resolve(state, Keyword.get(opts, :path) || state.base_cwd),
         {:ok, limit} <- limit(Keyword.get(opts, :limit, @default_grep_limit)) do
      search_opts = [
        path: path,
        glob: Keyword.get(opts, :glob),
        case_sensitive: Keyword.get(opts, :case_sensitive, true) != false,
        limit: limit
      ]

      case guarded(fn -> Search.grep(session, pattern, search_opts) end) do
        {:ok, matches} -> {:ok, grep_paths(state, Keyword.get(opts, :path), path, matches)}
        {:error, {:invalid_regex, message}} -> {:error, {:invalid_regex, message, nil}}
        other -> other
      end
    end
  end

  @doc """
  Mount host directory `host_path` at `vfs_path` now (Condukt's argument
  order), in the sandbox's `:mount_mode` (read-write by default, as
  Condukt's Virtual sandbox mounts; `mount_mode: :read_only` at `init/1`
  for mounts scripts cannot write), with every
  check `:mounts` has at `init/1`. `:ok` or `{:error, message}`.
  See `ExBashkit.Session.mount/4`.
  """
  @spec mount(t(), String.t(), String.t()) :: :ok | {:error, String.t()}
  def mount(%__MODULE__{session: session} = state, host_path, vfs_path)
      when is_binary(host_path) and is_binary(vfs_path) do
    with {:ok, vfs} <- resolve(state, vfs_path) do
      guarded(fn -> Session.mount(session, vfs, Path.expand(host_path), state.mount_mode) end)
    end
  end

  def mount(%__MODULE__{}, host_path, vfs_path),
    do: {:error, "paths must be strings, got: #{inspect({host_path, vfs_path})}"}

  @doc """
  Save the sandbox's files and shell state as a commit of its session's
  history (`ExBashkit.Session.commit/2`): `{:ok, id}`. `meta` is a map of
  strings (a message, the agent's step). With `checkout/2`, an agent's
  undo.

  ## Examples

      iex> {:ok, sandbox} = ExBashkit.Sandbox.init([])
      iex> :ok = ExBashkit.Sandbox.write_file(sandbox, "/f", "v1")
      iex> {:ok, id} = ExBashkit.Sandbox.commit(sandbox, %{message: "v1"})
      iex> :ok = ExBashkit.Sandbox.write_file(sandbox, "/f", "v2")
      iex> ExBashkit.Sandbox.checkout(sandbox, id)
      :ok
      iex> ExBashkit.Sandbox.read_file(sandbox, "/f")
      {:ok, "v1"}
  """
  @spec commit(t(), map()) :: {:ok, String.t()} | {:error, String.t()}
  def commit(%__MODULE__{session: session}, meta \\ %{}),
    do: guarded(fn -> Session.commit(session, meta) end)

  @doc """
  Put the sandbox back in the state of commit `id`
  (`ExBashkit.Session.checkout/2`): `:ok` or `{:error, message}`, and then
  nothing changed.
  """
  @spec checkout(t(), String.t()) :: :ok | {:error, String.t()}
  def checkout(%__MODULE__{session: session}, id),
    do: guarded(fn -> Session.checkout(session, id) end)

  @doc "The sandbox's commits, newest first (`ExBashkit.Session.log/2`)."
  @spec log(t(), keyword()) :: {:ok, [map()]} | {:error, String.t()}
  def log(%__MODULE__{session: session}, opts \\ []),
    do: guarded(fn -> Session.log(session, opts) end)

  @doc """
  The paths created, modified and deleted from commit `from` to `to`
  (default `:current`, the state now; `ExBashkit.Session.diff/3`).
  """
  @spec diff(t(), String.t(), String.t() | :current) ::
          {:ok, %{created: [String.t()], modified: [String.t()], deleted: [String.t()]}}
          | {:error, String.t()}
  def diff(%__MODULE__{session: session}, from, to \\ :current),
    do: guarded(fn -> Session.diff(session, from, to) end)

  # An absolute pattern with no `:cwd` is searched from `/`, so that its
  # paths come back absolute (as Condukt's own sandboxes answer).
  defp glob_cwd(_state, "/" <> _, nil), do: {:ok, nil}
  defp glob_cwd(state, _pattern, cwd), do: resolve(state, cwd || state.base_cwd)

  # An absolute `:path` gives absolute paths (`path` being where the search
  # ran: its matches are relative to it, or its name if it is a file).
  defp grep_paths(state, "/" <> _, path, matches) do
    base =
      if match?({:ok, %{type: :file}}, Session.stat(state.session, path)),
        do: Path.dirname(path),
        else: path

    Enum.map(matches, &%{&1 | path: VfsPath.join(base, &1.path)})
  end

  defp grep_paths(_state, _relative, _path, matches), do: matches

  defp known(opts, valid, fun) do
    case Enum.find(opts, fn {key, _} -> key not in valid end) do
      nil ->
        :ok

      {key, _} ->
        {:error,
         "unknown #{fun} option #{inspect(key)} (valid: " <>
           Enum.map_join(valid, ", ", &inspect/1) <> ")"}
    end
  end

  # -- exec helpers -------------------------------------------------------------

  # The shell state init/1 left, restored before a non-persistent exec
  # (files are not part of it).
  defp reset_shell(%{persistent: true}), do: :ok

  defp reset_shell(%{session: session, baseline: baseline}) do
    case Session.restore(session, baseline) do
      {:ok, _} -> :ok
      {:error, message} -> {:error, "cannot reset the shell state: " <> message}
    end
  end

  # `export`s and a `cd` on the first line of the script, so that line
  # numbers in the script's own messages stay right.
  defp preamble(state, opts) do
    with {:ok, env} <- env(Keyword.get(opts, :env, [])),
         {:ok, cwd} <- exec_cwd(state, Keyword.get(opts, :cwd)) do
      exports = Enum.map(env, fn {name, value} -> "export #{name}=#{quote_sh(value)}; " end)
      cd = if cwd, do: "cd -- #{quote_sh(cwd)} || exit 1; ", else: ""
      {:ok, IO.iodata_to_binary([exports, cd])}
    end
  end

  defp exec_cwd(_state, nil), do: {:ok, nil}
  defp exec_cwd(state, cwd), do: resolve(state, cwd)

  defp env(env) when is_map(env) and not is_struct(env), do: env(Map.to_list(env))

  defp env(env) when is_list(env) do
    Enum.reduce_while(env, {:ok, []}, fn
      {name, value}, {:ok, acc} ->
        name = to_string(name)
        value = to_string(value)

        if Regex.match?(~r/\A[A-Za-z_][A-Za-z0-9_]*\z/, name) and
             not String.contains?(value, <<0>>) do
          {:cont, {:ok, [{name, value} | acc]}}
        else
          {:halt, {:error, "invalid :env entry #{inspect({name, value})}"}}
        end

      other, _ ->
        {:halt, {:error, ":env entries must be {name, value} pairs, got: #{inspect(other)}"}}
    end)
    |> case do
      {:ok, pairs} -> {:ok, Enum.reverse(pairs)}
      error -> error
    end
  rescue
    e in [Protocol.UndefinedError, ArgumentError] ->
      {:error, "invalid :env: " <> Exception.message(e)}
  end

  defp env(other), do: {:error, ":env must be a map or a list of pairs, got: #{inspect(other)}"}

  defp quote_sh(value), do: "'" <> String.replace(value, "'", "'\\''") <> "'"

  defp script(command) when is_binary(command) do
    if String.valid?(command), do: {:ok, command}, else: {:error, "command is not valid UTF-8"}
  end

  defp script(other), do: {:error, "command must be a string, got: #{inspect(other)}"}

  defp timeout(nil), do: {:ok, @default_exec_timeout_ms}
  defp timeout(ms) when is_integer(ms) and ms >= 1, do: {:ok, ms}
  defp timeout(ms) when is_float(ms) and ms >= 1, do: {:ok, trunc(ms)}

  defp timeout(other),
    do: {:error, ":timeout must be a positive number of ms, got: #{inspect(other)}"}

  # -- init helpers -------------------------------------------------------------

  defp new_session(opts) do
    {:ok, Session.new(opts)}
  rescue
    e -> {:error, Exception.message(e)}
  end

  defp baseline(_session, true), do: {:ok, nil}

  defp baseline(session, false) do
    case Session.snapshot(session, exclude_filesystem: true) do
      {:ok, bytes} -> {:ok, bytes}
      {:error, message} -> {:error, "cannot capture the initial shell state: " <> message}
    end
  end

  defp mounts(mounts) when is_list(mounts) do
    Enum.reduce_while(mounts, {:ok, []}, fn mount, {:ok, acc} ->
      case mount(mount) do
        {:ok, spec} -> {:cont, {:ok, [spec | acc]}}
        error -> {:halt, error}
      end
    end)
    |> case do
      {:ok, specs} -> {:ok, Enum.reverse(specs)}
      error -> error
    end
  end

  defp mounts(other), do: {:error, ":mounts must be a list, got: #{inspect(other)}"}

  # Condukt's shapes (host first, :readonly/:readwrite) and the Session's
  # (vfs first, :read_only/:read_write): the mode tells them apart.
  defp mount({host, vfs}), do: mount({host, vfs, :readwrite})

  defp mount({host, vfs, mode}) when mode in [:readonly, :readwrite] and is_binary(host) do
    session_mode = if mode == :readonly, do: :read_only, else: :read_write
    {:ok, {vfs, Path.expand(host), session_mode}}
  end

  defp mount({vfs, host, mode}) when mode in [:read_only, :read_write],
    do: {:ok, {vfs, host, mode}}

  defp mount(other) do
    {:error,
     "invalid mount #{inspect(other)}: expected {host_path, vfs_path, :readonly | :readwrite} " <>
       "or {host_path, vfs_path}"}
  end

  defp base_cwd("/" <> _ = cwd) when is_binary(cwd) do
    if String.valid?(cwd),
      do: {:ok, VfsPath.normalize(cwd)},
      else: {:error, ":cwd is not valid UTF-8"}
  end

  defp base_cwd(other), do: {:error, ":cwd must be an absolute path, got: #{inspect(other)}"}

  defp boolean(value, _key) when is_boolean(value), do: {:ok, value}

  defp boolean(value, key),
    do: {:error, "#{inspect(key)} must be a boolean, got: #{inspect(value)}"}

  defp mount_mode(mode) when mode in [:read_only, :read_write], do: {:ok, mode}

  defp mount_mode(other),
    do: {:error, ":mount_mode must be :read_only or :read_write, got: #{inspect(other)}"}

  # Lift the session's own wall-clock limit unless the caller set one, so
  # that exec/3's :timeout is the deadline that matters.
  defp limits(limits) when is_map(limits) and not is_struct(limits),
    do: limits(Map.to_list(limits))

  defp limits(limits) when is_list(limits) do
    case List.keyfind(limits, :timeout_ms, 0) do
      {:timeout_ms, ms} when is_integer(ms) and ms >= 1 ->
        {:ok, limits, ms}

      nil ->
        {:ok, [{:timeout_ms, @lifted_session_timeout_ms} | limits], @lifted_session_timeout_ms}

      # Malformed: let Session.new/1 name the problem.
      _ ->
        {:ok, limits, @lifted_session_timeout_ms}
    end
  end

  defp limits(other), do: {:ok, other, @lifted_session_timeout_ms}

  # -- shared helpers -----------------------------------------------------------

  defp keyword(opts) when is_list(opts) do
    if Keyword.keyword?(opts),
      do: {:ok, opts},
      else: {:error, "options must be a keyword list, got: #{inspect(opts)}"}
  end

  defp keyword(other), do: {:error, "options must be a keyword list, got: #{inspect(other)}"}

  defp limit(nil), do: {:ok, nil}
  defp limit(n) when is_integer(n) and n >= 0, do: {:ok, n}
  defp limit(n) when is_float(n) and n >= 0, do: {:ok, trunc(n)}
  defp limit(other), do: {:error, ":limit must be a non-negative number, got: #{inspect(other)}"}

  defp resolve(%__MODULE__{base_cwd: base}, path) when is_binary(path) do
    cond do
      not String.valid?(path) -> {:error, "path is not valid UTF-8"}
      path == "" -> {:error, "empty path"}
      true -> {:ok, VfsPath.join(base, path)}
    end
  end

  defp resolve(_state, other), do: {:error, "path must be a string, got: #{inspect(other)}"}

  # File-style reasons that Condukt's tools recognize, decided by what is
  # at `path` rather than by the wording of the message.
  defp fs_reason(session, path, message) do
    case Session.stat(session, path) do
      {:error, _} -> :enoent
      {:ok, %{type: :dir}} -> :eisdir
      {:ok, _} -> message
    end
  end

  # A write fails with :eisdir on a directory; any other reason (a
  # read-only mount, a limit) is the message.
  defp write_reason(session, path, message) do
    case Session.stat(session, path) do
      {:ok, %{type: :dir}} -> :eisdir
      _ -> message
    end
  end

  # Options the search validates by raising become errors here: a sandbox
  # callback answers, it does not crash the tool that called it.
  defp guarded(fun) do
    fun.()
  rescue
    e in ArgumentError -> {:error, Exception.message(e)}
  end
end
