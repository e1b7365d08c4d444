defmodule ExBashkit.Session do
  @moduledoc """
  A persistent, stateful sandbox.

  Unlike `ExBashkit.exec/1`, which runs each script in a fresh interpreter, a
  session is a long-lived `bashkit::Bash` whose state carries across calls:
  environment variables, the current working directory, the in-memory virtual
  filesystem, shell functions and aliases all persist from one `exec/2` to the
  next, exactly as in an interactive shell.

  The handle is opaque. Hold it for as long as you want the state to live; it is
  reclaimed when it is garbage-collected. A session serializes its own calls:
  concurrent `exec/2` calls on the same session run one at a time, in arrival
  order; different sessions run in parallel.

  ## Example

      iex> session = ExBashkit.Session.new()
      iex> {:ok, _} = ExBashkit.Session.exec(session, "export COUNT=1")
      iex> {:ok, result} = ExBashkit.Session.exec(session, "echo $COUNT")
      iex> result.stdout
      "1\\n"

  ## Where scripts run

  Scripts run on the library's own interpreter threads (a small pool with large
  stacks), never on a BEAM scheduler: `exec/2` submits the script and waits for
  a message with the outcome. A long script therefore holds no scheduler, dirty
  or normal, and deep recursion in a script cannot overflow a scheduler's stack.

  ## Options

  `new/1` accepts options that seed the session's initial state:

    * `:env` - a map or keyword list of environment variables to pre-set. Keys
      and values are stringified (`env: %{"LANG" => "C"}` or `env: [LANG: "C"]`).
    * `:cwd` - the starting working directory (default `/`); created if missing.
    * `:username` - the virtual username reported by `whoami`/`id` (default
      `"sandbox"`).
    * `:hostname` - the virtual hostname reported by `hostname`/`uname -n`
      (default `"bashkit-sandbox"`).
    * `:files` - a map (or keyword list) of `path => content` to seed into the
      virtual filesystem before the first call, creating parent directories as
      needed. Content is any `t:iodata/0`. Equivalent to calling `write_file/3`
      for each entry.
    * `:limits` - a keyword list or map of resource limits enforced during
      execution (see "Resource limits" below).

  A malformed option raises `ArgumentError` naming the option.

  ## Resource limits

  bashkit already bounds execution with safe defaults; `:limits` tightens them
  for untrusted scripts. Each key is optional; unset keys keep bashkit's
  default. When a script exceeds a limit, `exec/2` returns `{:error, message}`
  and the session stays usable.

      session = ExBashkit.Session.new(limits: [max_commands: 1_000, timeout_ms: 2_000])

    * `:max_commands` - total commands one script may run (fuel; default 10,000).
      Assignments count too.
    * `:max_loop_iterations` - iterations of any single loop (default 10,000).
    * `:max_total_loop_iterations` - iterations across all loops, defeating the
      nested-loop multiplication trick (default 1,000,000).
    * `:max_function_depth` - recursion depth (default and ceiling 16: bashkit
      0.20 caps it there whatever you ask for).
    * `:max_input_bytes` - maximum script size in bytes (default 10,000,000).
    * `:timeout_ms` - wall-clock execution timeout in milliseconds (default
      30,000; must be >= 1). It holds even for a script that never yields.
    * `:max_stdout_bytes`, `:max_stderr_bytes` - output caps (default 1 MiB
      each); output past the cap is dropped and the result says so
      (`stdout_truncated`/`stderr_truncated`).
    * `:max_total_commands`, `:max_exec_calls` - cumulative caps across every
      exec of the session (default unlimited), so work cannot dodge the
      per-script limits by being split across calls.

  Count limits must be non-negative integers (a value past the platform maximum
  means "unlimited"); unknown keys raise `ArgumentError`.

  ## Virtual filesystem

  A session's in-memory filesystem is shared between scripts and the host. Use
  `write_file/3` to place files (e.g. inputs) and `read_file/2` to pull files
  back out (e.g. results a script produced) without going through a script:

      iex> session = ExBashkit.Session.new(files: %{"/in.txt" => "data\\n"})
      iex> {:ok, _} = ExBashkit.Session.exec(session, "wc -l < /in.txt > /out.txt")
      iex> ExBashkit.Session.read_file(session, "/out.txt")
      {:ok, "1\\n"}

  The filesystem functions resolve paths from the root, whatever the session's
  working directory; a relative path like `"out.txt"` means `"/out.txt"`.
  Contents are raw binaries: any bytes round-trip, NUL and non-UTF-8 included.
  """

  alias ExBashkit.{Callbacks, Native, Result}
  alias ExBashkit.Session.Options

  @enforce_keys [:resource]
  defstruct [:resource, builtins: %{}, virtual_fs: %{}, callback_timeout_ms: 30_000]

  @opaque t :: %__MODULE__{
            resource: reference(),
            builtins: %{optional(String.t()) => (map() -> term())},
            virtual_fs: %{optional(String.t()) => term()},
            callback_timeout_ms: pos_integer()
          }

  @typedoc "A filesystem entry's kind, as reported by `stat/2` and `list_dir/2`."
  @type fs_type :: :file | :dir | :symlink

  @typedoc "A resource-limit key accepted by the `:limits` option."
  @type limit_key ::
          :max_commands
          | :max_loop_iterations
          | :max_total_loop_iterations
          | :max_function_depth
          | :max_input_bytes
          | :timeout_ms
          | :max_stdout_bytes
          | :max_stderr_bytes
          | :max_total_commands
          | :max_exec_calls

  @typedoc "Access mode for a host directory mount."
  @type mount_mode :: :read_only | :read_write

  @typedoc """
  A virtual-filesystem backend for one mount: a 1-arity function, a module
  implementing `ExBashkit.VirtualFs`, or `{module, arg}`.
  """
  @type virtual_fs_spec :: (map() -> term()) | module() | {module(), term()}

  @typedoc "An option accepted by `new/1`."
  @type option ::
          {:env, %{optional(String.t() | atom()) => String.t()} | keyword()}
          | {:cwd, Path.t()}
          | {:username, String.t()}
          | {:hostname, String.t()}
          | {:files, %{optional(Path.t()) => iodata()} | [{Path.t(), iodata()}]}
          | {:mounts, [{Path.t(), Path.t(), mount_mode()}]}
          | {:allowed_mount_paths, [Path.t()]}
          | {:limits,
             %{optional(limit_key()) => non_neg_integer()} | [{limit_key(), non_neg_integer()}]}
          | {:allow_net, [String.t()] | :all}
          | {:block_private_ips, boolean()}
          | {:builtins, %{optional(String.t()) => (map() -> term())}}
          | {:builtin_timeout_ms, pos_integer()}
          | {:virtual_fs, %{optional(Path.t()) => virtual_fs_spec()}}
          | {:python, boolean() | keyword()}

  @typedoc "An option accepted by `exec/3`."
  @type exec_option :: {:stdin, iodata()}

  @doc """
  Create a new persistent session, optionally seeding its initial state.

  See the module doc for the supported `opts`. Malformed options raise
  `ArgumentError` (they are a programmer error), as does a `:files` entry that
  cannot be written.

  ## Examples

      iex> session = ExBashkit.Session.new(env: [GREETING: "hello"], cwd: "/work")
      iex> {:ok, result} = ExBashkit.Session.exec(session, "echo $GREETING from $(pwd)")
      iex> result.stdout
      "hello from /work\\n"
  """
  @spec new([option()]) :: t()
  def new(opts \\ []) do
    parsed = Options.parse!(opts)

    case create(parsed.native) do
      {:ok, resource} ->
        %__MODULE__{
          resource: resource,
          builtins: parsed.builtins,
          virtual_fs: parsed.virtual_fs,
          callback_timeout_ms: parsed.callback_timeout_ms
        }

      {:error, message} ->
        raise ArgumentError, "ExBashkit.Session.new/1: " <> message
    end
  end

  # A configuration that only describes in-memory state builds in tens of
  # microseconds: do it on the calling scheduler rather than pay the round
  # trip to a dirty scheduler. Seeding files, host mounts, a cwd to create or
  # an embedded runtime may take longer: those go to a dirty scheduler.
  defp create(%{files: [], mounts: [], allowed_mount_paths: nil, cwd: "/"} = native)
       when native.python == [] and native.virtual_fs == [] and native.builtins == [],
       do: Native.session_new_inline(native)

  defp create(native), do: Native.session_new(native)

  @doc """
  Execute `script` against `session`, mutating it in place.

  Any env/cwd/filesystem/function changes the script makes persist for the
  next call. Returns `{:ok, %ExBashkit.Result{}}` on success (a non-zero
  `exit_code` is still `{:ok, ...}`, just like a real shell) or
  `{:error, message}` if the script could not be parsed, exceeded a limit, or
  the interpreter itself failed. The session stays usable either way.

  Options:

    * `:stdin` - iodata fed to the script's standard input.

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> {:ok, _} = ExBashkit.Session.exec(session, "cd /tmp")
      iex> {:ok, result} = ExBashkit.Session.exec(session, "pwd")
      iex> result.stdout
      "/tmp\\n"

      iex> session = ExBashkit.Session.new()
      iex> {:ok, result} = ExBashkit.Session.exec(session, "tr a-z A-Z", stdin: "shout\\n")
      iex> result.stdout
      "SHOUT\\n"
  """
  @spec exec(t(), String.t(), [exec_option()]) :: {:ok, Result.t()} | {:error, String.t()}
  def exec(%__MODULE__{resource: resource}, script, opts \\ [])
      when is_binary(script) and is_list(opts) do
    with {:ok, call} <- exec_options(opts),
         :ok <- check_script(script) do
      ref = make_ref()

      case Native.session_exec(resource, script, call, self(), ref) do
        :ok -> Callbacks.await(ref)
        {:error, _} = error -> error
      end
    end
  end

  defp exec_options(opts) do
    Enum.reduce_while(opts, {:ok, %{stdin: nil}}, fn
      {:stdin, data}, {:ok, acc} ->
        case iodata_to_binary(data) do
          {:ok, bin} ->
            {:cont, {:ok, %{acc | stdin: bin}}}

          :error ->
            raise ArgumentError, "exec option :stdin must be iodata, got: #{inspect(data)}"
        end

      other, _acc ->
        raise ArgumentError, "unknown exec option: #{inspect(other)}"
    end)
  end

  @doc false
  # Scripts reach the interpreter as UTF-8 text.
  def check_script(script) do
    if String.valid?(script),
      do: :ok,
      else: {:error, "script is not valid UTF-8"}
  end

  defp iodata_to_binary(data) do
    {:ok, IO.iodata_to_binary(data)}
  rescue
    ArgumentError -> :error
  end

  @doc """
  Read the contents of `path` from the session's virtual filesystem.

  Returns `{:ok, binary}`, including for files a script wrote, or
  `{:error, message}` if the file does not exist or cannot be read. The result
  is a raw binary, so it round-trips arbitrary (including non-UTF-8) content.

  `path` is resolved from the filesystem root, independent of the session's
  working directory.

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> {:ok, _} = ExBashkit.Session.exec(session, "echo result > /out.txt")
      iex> ExBashkit.Session.read_file(session, "/out.txt")
      {:ok, "result\\n"}
  """
  @spec read_file(t(), Path.t()) :: {:ok, binary()} | {:error, String.t()}
  def read_file(%__MODULE__{resource: resource}, path) do
    with {:ok, path} <- fs_path(path), do: Native.fs_read(resource, path)
  end

  @doc """
  Write `content` (any `t:iodata/0`) to `path` in the session's virtual
  filesystem, creating parent directories as needed.

  Returns `:ok`, or `{:error, message}` if the write was rejected (e.g. a
  filesystem limit, or a path that is a directory). The file is immediately
  visible to subsequent `exec/2` calls and to `read_file/2`. A relative path
  like `"out.txt"` is treated as `"/out.txt"`.

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> ExBashkit.Session.write_file(session, "/etc/motd", "welcome\\n")
      :ok
      iex> {:ok, result} = ExBashkit.Session.exec(session, "cat /etc/motd")
      iex> result.stdout
      "welcome\\n"
  """
  @spec write_file(t(), Path.t(), iodata()) :: :ok | {:error, String.t()}
  def write_file(%__MODULE__{resource: resource}, path, content) do
    content =
      case iodata_to_binary(content) do
        {:ok, bin} ->
          bin

        :error ->
          raise ArgumentError, "write_file/3 content must be iodata, got: #{inspect(content)}"
      end

    with {:ok, path} <- fs_path(path), do: Native.fs_write(resource, path, content)
  end

  @doc """
  List the entries of directory `path` in the session's filesystem.

  `{:ok, [{name, :file | :dir | :symlink}]}` sorted by name (names are the
  immediate children, not full paths), or `{:error, message}` if `path` is not
  a readable directory.

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> {:ok, _} = ExBashkit.Session.exec(session, "mkdir /d; echo x > /d/a.txt")
      iex> ExBashkit.Session.list_dir(session, "/d")
      {:ok, [{"a.txt", :file}]}
  """
  @spec list_dir(t(), Path.t()) :: {:ok, [{String.t(), fs_type()}]} | {:error, String.t()}
  def list_dir(%__MODULE__{resource: resource}, path) do
    with {:ok, path} <- fs_path(path), do: Native.fs_list(resource, path)
  end

  @doc """
  Create directory `path` in the session's filesystem.

  Returns `:ok` or `{:error, message}`. With `parents: true` it creates any
  missing parent directories (like `mkdir -p`) and succeeds if the directory
  already exists; without it, a missing parent is an error.

  ## Options

    * `:parents` - create missing parents (default `false`).

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> ExBashkit.Session.mkdir(session, "/a/b", parents: true)
      :ok
      iex> ExBashkit.Session.stat(session, "/a/b")
      {:ok, %{type: :dir, size: 0}}
  """
  @spec mkdir(t(), Path.t(), [{:parents, boolean()}]) :: :ok | {:error, String.t()}
  def mkdir(%__MODULE__{resource: resource}, path, opts \\ []) do
    parents = bool_opt!(opts, :parents, "mkdir/3")
    with {:ok, path} <- fs_path(path), do: Native.fs_mkdir(resource, path, parents)
  end

  @doc """
  Remove `path` from the session's filesystem.

  Returns `:ok` or `{:error, message}`. Removing a non-empty directory requires
  `recursive: true`.

  ## Options

    * `:recursive` - remove a directory and its contents (default `false`).

  ## Examples

      iex> session = ExBashkit.Session.new(files: %{"/d/f" => "x"})
      iex> {:error, _} = ExBashkit.Session.remove(session, "/d")
      iex> ExBashkit.Session.remove(session, "/d", recursive: true)
      :ok
  """
  @spec remove(t(), Path.t(), [{:recursive, boolean()}]) :: :ok | {:error, String.t()}
  def remove(%__MODULE__{resource: resource}, path, opts \\ []) do
    recursive = bool_opt!(opts, :recursive, "remove/3")
    with {:ok, path} <- fs_path(path), do: Native.fs_remove(resource, path, recursive)
  end

  @doc """
  Rename/move `from` to `to` within the session's filesystem.

  Returns `:ok` or `{:error, message}`.

  ## Examples

      iex> session = ExBashkit.Session.new(files: %{"/a.txt" => "x"})
      iex> ExBashkit.Session.rename(session, "/a.txt", "/b.txt")
      :ok
      iex> ExBashkit.Session.read_file(session, "/b.txt")
      {:ok, "x"}
  """
  @spec rename(t(), Path.t(), Path.t()) :: :ok | {:error, String.t()}
  def rename(%__MODULE__{resource: resource}, from, to) do
    with {:ok, from} <- fs_path(from),
         {:ok, to} <- fs_path(to),
         do: Native.fs_rename(resource, from, to)
  end

  @doc """
  Return metadata for `path` in the session's filesystem.

  `{:ok, %{type: :file | :dir | :symlink, size: non_neg_integer()}}`, or
  `{:error, message}` if the path does not exist. A symlink is reported as
  itself, not followed. Like `read_file/2`, it resolves from the filesystem
  root; it does not wait for the interpreter, so it also answers while a script
  is running on the session.

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> {:ok, _} = ExBashkit.Session.exec(session, "printf 12345 > /f")
      iex> ExBashkit.Session.stat(session, "/f")
      {:ok, %{type: :file, size: 5}}
  """
  @spec stat(t(), Path.t()) ::
          {:ok, %{type: fs_type(), size: non_neg_integer()}} | {:error, String.t()}
  def stat(%__MODULE__{resource: resource}, path) do
    with {:ok, path} <- fs_path(path),
         {:ok, {type, size}} <- Native.fs_stat(resource, path),
         do: {:ok, %{type: type, size: size}}
  end

  defp bool_opt!(opts, key, fun) when is_list(opts) do
    Enum.each(opts, fn
      {^key, value} when is_boolean(value) ->
        :ok

      {^key, value} ->
        raise ArgumentError,
              "#{fun} option #{inspect(key)} must be a boolean, got: #{inspect(value)}"

      other ->
        raise ArgumentError, "unknown #{fun} option: #{inspect(other)}"
    end)

    Keyword.get(opts, key, false)
  end

  defp bool_opt!(opts, _key, fun),
    do: raise(ArgumentError, "#{fun} options must be a keyword list, got: #{inspect(opts)}")

  # Filesystem API paths: strings (or charlists), rooted at `/`.
  defp fs_path(path) when is_list(path) do
    fs_path(List.to_string(path))
  rescue
    _ in [ArgumentError, UnicodeConversionError] ->
      raise ArgumentError, "path must be a string, got: #{inspect(path)}"
  end

  defp fs_path(path) when is_binary(path) do
    cond do
      not String.valid?(path) -> {:error, "#{inspect(path)}: path is not valid UTF-8"}
      String.contains?(path, <<0>>) -> {:error, "#{inspect(path)}: path contains a NUL byte"}
      path == "" -> {:error, "empty path"}
      String.starts_with?(path, "/") -> {:ok, path}
      true -> {:ok, "/" <> path}
    end
  end

  defp fs_path(path), do: raise(ArgumentError, "path must be a string, got: #{inspect(path)}")

  defimpl Inspect do
    # Shows what a person debugging wants: which session, whether it is busy,
    # where it is (cwd is only read when idle: it lives in the interpreter).
    def inspect(%{resource: resource} = session, _opts) do
      {id, running, cwd} = ExBashkit.Native.session_info(resource)

      fields =
        [id: id, status: if(running, do: :running, else: :idle)] ++
          if(cwd, do: [cwd: cwd], else: []) ++
          if(session.builtins == %{}, do: [], else: [builtins: Map.keys(session.builtins)]) ++
          if session.virtual_fs == %{}, do: [], else: [virtual_fs: Map.keys(session.virtual_fs)]

      "#ExBashkit.Session<" <>
        Enum.map_join(fields, ", ", fn {k, v} -> "#{k}: #{Kernel.inspect(v)}" end) <> ">"
    end
  end
end
