defmodule ExBashkit.Search do
  @moduledoc """
  Find files by glob and search their contents by regex in a session's
  filesystem, without running a script.

  Both walk the filesystem scripts see (the in-memory filesystem, host
  mounts, `:virtual_fs` backends) in Rust, through bashkit's filesystem
  interface: no shell, no output parsing, no quoting to get wrong. Like
  `ExBashkit.Session.exec/3`, a search waits for a running script to end and
  runs between scripts, in arrival order.

  The work is bounded: at most `:max_entries` directory entries visited
  (default 100 000), `:max_bytes` of file contents read by `grep/3` (default
  64 MiB) and `:timeout_ms` of wall-clock time (default 30 000). Past a bound
  the answer is `{:error, message}` naming the option, never a silently
  partial list. Symlinks are listed but never followed, so a walk cannot
  loop.

  ## Examples

      iex> session = ExBashkit.Session.new(files: %{"/w/lib/a.ex" => "defmodule A do\\nend\\n", "/w/b.txt" => "b"})
      iex> ExBashkit.Search.glob(session, "/w/**/*.ex")
      {:ok, ["/w/lib/a.ex"]}
      iex> ExBashkit.Search.grep(session, "defmodule", path: "/w")
      {:ok, [%{path: "lib/a.ex", line_number: 1, line: "defmodule A do"}]}
  """

  alias ExBashkit.Session.{Defaults, VfsPath}

  @default_max_entries 100_000
  @default_max_bytes 64 * 1024 * 1024
  @default_max_file_bytes 16 * 1024 * 1024
  @default_timeout_ms 30_000

  @typedoc "A line `grep/3` found."
  @type match :: %{path: String.t(), line_number: pos_integer(), line: String.t()}

  @typedoc "A bound on a search's work, accepted by `glob/3` and `grep/3`."
  @type bound ::
          {:max_entries, pos_integer()} | {:timeout_ms, pos_integer()}

  @doc """
  Paths matching the glob `pattern`, sorted.

  Syntax: `*` and `?` match within one path segment (dot files included),
  `**` as a whole segment matches any number of directories (zero included),
  `[abc]`, `[!a-z]`, `{ex,exs}` as in bash, `\\\\*` a literal `*`. Files,
  directories and symlinks all match.

  A relative `pattern` is resolved against `:cwd` (default `/`), and so are
  the paths returned: relative to `:cwd` when they lie under it, absolute
  otherwise. An absolute pattern returns absolute paths unless `:cwd` is
  given.

  ## Options

    * `:cwd` - the base directory (absolute).
    * `:limit` - at most this many paths (the first ones in sorted order).
    * `:max_entries`, `:timeout_ms` - bounds on the walk (see the module doc).

  ## Examples

      iex> session = ExBashkit.Session.new(files: %{"/p/a.ex" => "", "/p/sub/b.ex" => "", "/p/c.md" => ""})
      iex> ExBashkit.Search.glob(session, "**/*.ex", cwd: "/p")
      {:ok, ["a.ex", "sub/b.ex"]}
      iex> ExBashkit.Search.glob(session, "*", cwd: "/p", limit: 2)
      {:ok, ["a.ex", "c.md"]}
  """
  @spec glob(ExBashkit.Session.t(), String.t(), keyword()) ::
          {:ok, [String.t()]} | {:error, String.t()}
  def glob(%ExBashkit.Session{} = session, pattern, opts \\ []) when is_binary(pattern) do
    opts = keyword!(opts, [:cwd, :limit, :max_entries, :timeout_ms])

    with {:ok, pattern} <- utf8(pattern, "pattern"),
         {:ok, cwd} <- dir_opt(opts, :cwd) do
      base = cwd || "/"
      absolute = VfsPath.join(base, pattern)

      request = %{
        pattern: absolute,
        base: if(cwd || not String.starts_with?(pattern, "/"), do: base),
        limit: limit!(opts),
        max_entries: pos!(opts, :max_entries, @default_max_entries),
        timeout_ms: pos!(opts, :timeout_ms, @default_timeout_ms)
      }

      run(session, :glob, request)
    end
  end

  @doc """
  Lines matching the regex `pattern` in the files under `:path`, in path
  order then line order, as `%{path:, line_number:, line:}` with `path`
  relative to `:path`.

  `pattern` uses the syntax of Rust's `regex` crate (linear time, no
  backreferences or look-around); a pattern it rejects returns
  `{:error, {:invalid_regex, message}}`. Lines are split on `\\n`; a line
  longer than 4 KiB is cut. Hidden entries (names starting with `.`), binary
  files (a NUL byte in the first 8 KiB) and files over `:max_file_bytes`
  (default 16 MiB) are skipped; a `:path` naming a file searches that file.

  ## Options

    * `:path` - the directory (or file) to search, absolute (default `/`).
    * `:glob` - only files matching it: a glob without `/` matches file
      names at any depth (`"*.ex"`), one with `/` matches the path relative
      to `:path` (`"lib/**/*.ex"`).
    * `:case_sensitive` - default `true`.
    * `:limit` - stop after this many matches.
    * `:max_entries`, `:max_bytes`, `:max_file_bytes`, `:timeout_ms` - bounds
      (see the module doc).

  ## Examples

      iex> session = ExBashkit.Session.new(files: %{"/src/a.py" => "x = 1\\nY = 2\\n", "/src/b.txt" => "y\\n"})
      iex> ExBashkit.Search.grep(session, "^y", path: "/src", case_sensitive: false, glob: "*.py")
      {:ok, [%{path: "a.py", line_number: 2, line: "Y = 2"}]}
      iex> {:error, {:invalid_regex, _}} = ExBashkit.Search.grep(session, "(unclosed")
  """
  @spec grep(ExBashkit.Session.t(), String.t(), keyword()) ::
          {:ok, [match()]} | {:error, String.t() | {:invalid_regex, String.t()}}
  def grep(%ExBashkit.Session{} = session, pattern, opts \\ []) when is_binary(pattern) do
    opts =
      keyword!(opts, [
        :path,
        :glob,
        :case_sensitive,
        :limit,
        :max_entries,
        :max_bytes,
        :max_file_bytes,
        :timeout_ms
      ])

    with {:ok, pattern} <- utf8(pattern, "pattern"),
         {:ok, path} <- dir_opt(opts, :path),
         {:ok, glob} <- glob_opt(opts[:glob]) do
      request = %{
        pattern: pattern,
        root: path || "/",
        glob: glob,
        case_sensitive: bool!(opts, :case_sensitive, true),
        limit: limit!(opts),
        max_entries: pos!(opts, :max_entries, @default_max_entries),
        max_bytes: pos!(opts, :max_bytes, @default_max_bytes),
        max_file_bytes: pos!(opts, :max_file_bytes, @default_max_file_bytes),
        timeout_ms: pos!(opts, :timeout_ms, @default_timeout_ms)
      }

      with {:ok, matches} <- run(session, :grep, request) do
        {:ok,
         Enum.map(matches, fn {path, number, line} ->
           %{path: path, line_number: number, line: line}
         end)}
      end
    end
  end

  # Submit the job and wait for its answer, serving :virtual_fs back-calls.
  defp run(%ExBashkit.Session{} = session, op, request) do
    context = ExBashkit.Session.Exec.callback_context(session)
    ExBashkit.Request.run(session, op, [request], "#{op}", context)
  end

  # -- options ----------------------------------------------------------------

  defp keyword!(opts, known) when is_list(opts) do
    Enum.each(opts, fn
      {key, _} when is_atom(key) ->
        if key not in known,
          do: raise(ArgumentError, "unknown option #{inspect(key)}; known: #{inspect(known)}")

      other ->
        raise ArgumentError, "options must be a keyword list, got entry: #{inspect(other)}"
    end)

    opts
  end

  defp keyword!(opts, _known),
    do: raise(ArgumentError, "options must be a keyword list, got: #{inspect(opts)}")

  defp utf8(value, what) do
    cond do
      not String.valid?(value) -> {:error, "#{what} is not valid UTF-8"}
      String.contains?(value, <<0>>) -> {:error, "#{what} contains a NUL byte"}
      true -> {:ok, value}
    end
  end

  # An absolute directory option, normalized; `nil` when absent.
  defp dir_opt(opts, key) do
    case Keyword.get(opts, key) do
      nil ->
        {:ok, nil}

      "/" <> _ = path ->
        with {:ok, path} <- utf8(path, inspect(key)), do: {:ok, VfsPath.normalize(path)}

      other ->
        raise ArgumentError, "#{inspect(key)} must be an absolute path, got: #{inspect(other)}"
    end
  end

  defp glob_opt(nil), do: {:ok, nil}
  defp glob_opt(glob) when is_binary(glob), do: utf8(glob, ":glob")
  defp glob_opt(other), do: raise(ArgumentError, ":glob must be a string, got: #{inspect(other)}")

  defp limit!(opts) do
    case Keyword.get(opts, :limit) do
      nil ->
        nil

      n when is_integer(n) and n >= 0 ->
        Defaults.clamp_u64(n)

      other ->
        raise ArgumentError, ":limit must be a non-negative integer, got: #{inspect(other)}"
    end
  end

  defp pos!(opts, key, default) do
    case Keyword.get(opts, key, default) do
      n when is_integer(n) and n >= 1 ->
        Defaults.clamp_u64(n)

      other ->
        raise ArgumentError, "#{inspect(key)} must be a positive integer, got: #{inspect(other)}"
    end
  end

  defp bool!(opts, key, default) do
    case Keyword.get(opts, key, default) do
      flag when is_boolean(flag) -> flag
      other -> raise ArgumentError, "#{inspect(key)} must be a boolean, got: #{inspect(other)}"
    end
  end
end
