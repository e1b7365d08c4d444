defmodule ExBashkit.VirtualFs do
  @moduledoc """
  A filesystem served by your application, mounted into a session with the
  `:virtual_fs` option.

  Every operation a script makes under the mount path (`cat`, `ls`, `echo >`,
  `mkdir`, `rm`, `mv`, `find`, `grep -r`, ...) becomes one call to the
  backend, and the backend's answer becomes the operation's outcome. Files
  can be generated on demand or proxied to a real store.

      defmodule MyApp.UsersFs do
        use ExBashkit.VirtualFs

        @impl true
        def read(repo, "/" <> id), do: fetch(repo, id)

        @impl true
        def list(repo, "/"), do: {:ok, for(id <- ids(repo), do: {id, :file})}
      end

      ExBashkit.Session.new(virtual_fs: %{"/users" => {MyApp.UsersFs, MyApp.Repo}})

  ## Backends

  A backend is given as one of:

    * `{module, arg}`: each operation calls a callback of `module` with `arg`
      first and the path rooted at the mount (a script's `/users/42` under a
      mount at `/users` arrives as `"/42"`, the mount point itself as `"/"`);
    * `module`: the same, with `arg` `nil`;
    * a 1-arity function, called with one request map per operation
      (`%{op: :read, path: "/42"}`, see `t:request/0`).

  `use ExBashkit.VirtualFs` declares the behaviour and defines every callback
  as `{:error, :enotsup}`, except `stat/2`, which is derived from `read/2`
  (the mount point `"/"` is a directory; any other path is a file of the
  size `read/2` returns, or `read/2`'s error). A backend that implements only
  `read/2` therefore serves `cat`, `test -f` and `stat`. Override what you
  need. A module written for the earlier single-callback contract
  (`handle(request, arg)`, with the request maps of the function form) still
  works: a module that defines `handle/2` is called that way.

  ## Which shell operation reaches which callback

  | callback | reached by | success answer |
  |---|---|---|
  | `read(arg, path)` | `cat`, `head`, `grep`, `source`, `<` redirections, the source of `cp` | `{:ok, iodata}` |
  | `write(arg, path, data)` | `>` redirections, `tee`, the target of `cp` | `:ok` |
  | `append(arg, path, data)` | `>>` redirections, `tee -a` | `:ok` |
  | `mkdir(arg, path, recursive)` | `mkdir` (`recursive` is `true` with `-p`) | `:ok` |
  | `remove(arg, path, recursive)` | `rm`, `rmdir` (`recursive` is `true` with `-r`) | `:ok` |
  | `rename(arg, from, to)` | `mv` within the mount | `:ok` |
  | `list(arg, path)` | `ls`, `find`, `grep -r`, `du`, globs | `{:ok, [{name, :file \\| :dir \\| :symlink} \\| name]}` |
  | `stat(arg, path)` | `test -e/-f/-d`, `[ ... ]`, `stat`, `ls` of a file, existence checks, `chmod` | `{:ok, %{type: :file \\| :dir \\| :symlink, size: non_neg_integer()}}` |

  In a listing, a bare `name` is a file. Symlinks cannot be created in a
  backend. For the function form, the request's `op` is the callback's name
  and its extra argument is under `:content` (write, append), `:parents`
  (mkdir), `:recursive` (remove) or `:to` (rename).

  ## Errors

  Answer `{:error, errno}` with an errno-style atom and the script sees the
  message it expects: `:enoent` ("No such file or directory"), `:eacces`,
  `:eexist`, `:enotdir`, `:eisdir`, `:enotempty`, `:erofs`, `:enotsup`,
  `:einval`, `:efbig`, `:etimedout`. `{:error, "message"}` passes the message
  through as is.

  ## Robustness

  The backend's answers are not trusted. A malformed answer fails that one
  operation with a message naming the problem, and the session stays usable:

    * a listing entry whose name is `""`, `"."`, `".."`, contains `/` or NUL,
      is not a valid UTF-8 string, or whose type is not `:file`, `:dir` or
      `:symlink` fails the listing (an unknown type is never taken for a
      file); duplicate names are listed once;
    * listing a directory more than 64 levels below the mount fails, so a
      backend that reports ever-deeper directories cannot make `find` or
      `grep -r` recurse without bound;
    * every reply is measured against the session's `:max_reply_bytes`
      (default 10 MB) before it reaches the interpreter: a `read`'s data, a
      listing (names plus 64 bytes per entry), an error message. Over the
      cap the operation fails with a message naming `:max_reply_bytes`; the
      oversized data is never copied into the interpreter.

  A backend runs like a custom builtin: in a fresh process per call (not the
  caller's: do not rely on its process dictionary or `self()`), bounded by the
  session's `:builtin_timeout_ms`; a raise, throw, exit or timeout fails only
  that operation. When the script ends first (its timeout, `cancel/1`), the
  backend's process is killed before the caller gets its answer. It must not
  call `ExBashkit.Session.exec/3` on its own session (that returns an error at
  once); other sessions are fine.

  Backends serve scripts only: `ExBashkit.Session.read_file/2` and the other
  filesystem functions return `{:error, _}` for paths under a `:virtual_fs`
  mount.
  """

  @typedoc "A filesystem operation."
  @type op :: :read | :write | :append | :mkdir | :remove | :rename | :list | :stat

  @typedoc "One operation on the backend, with its path rooted at the mount."
  @type request :: %{
          required(:op) => op(),
          required(:path) => String.t(),
          optional(:content) => binary(),
          optional(:parents) => boolean(),
          optional(:recursive) => boolean(),
          optional(:to) => String.t()
        }

  @typedoc "An entry's kind."
  @type kind :: :file | :dir | :symlink

  @typedoc "What a backend answers."
  @type reply ::
          :ok
          | {:ok, iodata()}
          | {:ok, [{String.t(), kind()}]}
          | {:ok, %{required(:type) => kind(), optional(:size) => non_neg_integer()}}
          | {:error, atom() | String.t()}

  @typedoc "The mount's argument: the `arg` of `{module, arg}`, else `nil`."
  @type arg :: term()

  @typedoc "A path rooted at the mount: `\"/\"` is the mount point."
  @type path :: String.t()

  @typedoc "An entry of a listing: `{name, kind}`, or a bare name for a file."
  @type entry :: {String.t(), kind()} | String.t()

  @typedoc "An error answer: an errno-style atom or a message."
  @type error :: {:error, atom() | String.t()}

  @doc "The contents of the file at `path`."
  @callback read(arg(), path()) :: {:ok, iodata()} | error()

  @doc "Replace the contents of the file at `path` with `data`."
  @callback write(arg(), path(), data :: binary()) :: :ok | error()

  @doc "Append `data` to the file at `path`."
  @callback append(arg(), path(), data :: binary()) :: :ok | error()

  @doc "Create the directory `path` (its parents too when `recursive`)."
  @callback mkdir(arg(), path(), recursive :: boolean()) :: :ok | error()

  @doc "Remove `path` (a directory and its contents when `recursive`)."
  @callback remove(arg(), path(), recursive :: boolean()) :: :ok | error()

  @doc "Move `from` to `to`, both rooted at the mount."
  @callback rename(arg(), from :: path(), to :: path()) :: :ok | error()

  @doc "The entries of the directory `path`."
  @callback list(arg(), path()) :: {:ok, [entry()]} | error()

  @doc "The kind and size of `path`."
  @callback stat(arg(), path()) ::
              {:ok, %{required(:type) => kind(), optional(:size) => non_neg_integer()}} | error()

  @doc """
  The earlier single-callback contract: one `request()` map per operation.
  A module that defines it is called through it instead of the callbacks
  above.
  """
  @callback handle(request(), arg()) :: reply()

  @optional_callbacks read: 2,
                      write: 3,
                      append: 3,
                      mkdir: 3,
                      remove: 3,
                      rename: 3,
                      list: 2,
                      stat: 2,
                      handle: 2

  @doc false
  defmacro __using__(_opts) do
    quote do
      @behaviour ExBashkit.VirtualFs

      def read(_arg, _path), do: {:error, :enotsup}
      def write(_arg, _path, _data), do: {:error, :enotsup}
      def append(_arg, _path, _data), do: {:error, :enotsup}
      def mkdir(_arg, _path, _recursive), do: {:error, :enotsup}
      def remove(_arg, _path, _recursive), do: {:error, :enotsup}
      def rename(_arg, _from, _to), do: {:error, :enotsup}
      def list(_arg, _path), do: {:error, :enotsup}
      def stat(arg, path), do: ExBashkit.VirtualFs.stat_from_read(__MODULE__, arg, path)

      defoverridable read: 2,
                     write: 3,
                     append: 3,
                     mkdir: 3,
                     remove: 3,
                     rename: 3,
                     list: 2,
                     stat: 2
    end
  end

  @doc """
  A `stat/2` answer derived from `module.read(arg, path)`: the mount point
  is a directory, any other path a file of the size `read/2` returns; an
  error of `read/2` is returned as is. This is the default `stat/2` of
  `use ExBashkit.VirtualFs`.

  ## Examples

      iex> defmodule DocFs do
      ...>   use ExBashkit.VirtualFs
      ...>   def read(_arg, "/hello"), do: {:ok, ["hel", "lo\\n"]}
      ...>   def read(_arg, _path), do: {:error, :enoent}
      ...> end
      iex> ExBashkit.VirtualFs.stat_from_read(DocFs, nil, "/hello")
      {:ok, %{type: :file, size: 6}}
      iex> ExBashkit.VirtualFs.stat_from_read(DocFs, nil, "/nope")
      {:error, :enoent}
      iex> ExBashkit.VirtualFs.stat_from_read(DocFs, nil, "/")
      {:ok, %{type: :dir, size: 0}}
  """
  @spec stat_from_read(module(), arg(), path()) ::
          {:ok, %{type: kind(), size: non_neg_integer()}} | term()
  def stat_from_read(_module, _arg, "/"), do: {:ok, %{type: :dir, size: 0}}

  def stat_from_read(module, arg, path) do
    case module.read(arg, path) do
      {:ok, data} ->
        try do
          {:ok, %{type: :file, size: IO.iodata_length(data)}}
        rescue
          ArgumentError -> {:ok, data}
        end

      other ->
        other
    end
  end
end
