defmodule ExBashkit.VirtualFs do
  @moduledoc """
  A filesystem served by your application, mounted into a session with the
  `:virtual_fs` option.

  Every operation a script makes under the mount path (`cat`, `ls`, `echo >`,
  `mkdir`, `rm`, `mv`, `find`, `grep -r`, ...) becomes one call to the backend
  with a request map, and the backend's answer becomes the operation's
  outcome. Files can be generated on demand or proxied to a real store.

      defmodule MyApp.UsersFs do
        @behaviour ExBashkit.VirtualFs

        @impl true
        def handle(%{op: :read, path: "/" <> id}, repo), do: fetch(repo, id)
        def handle(%{op: :list, path: "/"}, repo), do: {:ok, for(id <- ids(repo), do: {id, :file})}
        def handle(%{op: :stat, path: "/"}, _repo), do: {:ok, %{type: :dir, size: 0}}
        def handle(%{op: :stat, path: "/" <> id}, repo), do: stat(repo, id)
        def handle(_request, _repo), do: {:error, :enotsup}
      end

      ExBashkit.Session.new(virtual_fs: %{"/users" => {MyApp.UsersFs, MyApp.Repo}})

  A backend is given as a module implementing this behaviour (`handle/2`
  receives `nil` as its argument), a `{module, arg}` pair, or a single 1-arity
  function receiving the request map.

  ## Requests

  One map per call; `path` is rooted at the mount (a script's
  `/users/42` under a mount at `/users` arrives as `"/42"`, the mount point
  itself as `"/"`):

  | `op` | extra keys | success answer |
  |---|---|---|
  | `:read` | | `{:ok, iodata}` (the contents) |
  | `:write` | `content` (binary) | `:ok` |
  | `:append` | `content` (binary) | `:ok` |
  | `:mkdir` | `parents` (boolean) | `:ok` |
  | `:remove` | `recursive` (boolean) | `:ok` |
  | `:rename` | `to` (path rooted at the mount) | `:ok` |
  | `:list` | | `{:ok, [{name, :file \\| :dir \\| :symlink}]}` |
  | `:stat` | | `{:ok, %{type: :file \\| :dir \\| :symlink, size: non_neg_integer()}}` |

  `exists` checks and `chmod` are answered with `:stat`; `cp` within the
  mount with `:read` and `:write`. Symlinks cannot be created in a backend.

  ## Errors

  Answer `{:error, errno}` with an errno-style atom and the script sees the
  message it expects: `:enoent` ("No such file or directory"), `:eacces`,
  `:eexist`, `:enotdir`, `:eisdir`, `:enotempty`, `:erofs`, `:enotsup`,
  `:einval`, `:efbig`, `:etimedout`. `{:error, "message"}` passes the message
  through as is.

  ## Robustness

  The backend's answers are not trusted. A malformed answer fails that one
  operation with a message naming the problem. Listings are cleaned: entries
  named `""`, `"."`, `".."`, names containing `/` or NUL, non-binary names and
  duplicates are dropped, and a listing of more than 10,000 entries is an
  error, so `find` and `grep -r` over any backend terminate. File contents
  over 10 MB (bashkit's maximum file size) are refused with `:efbig`.

  A backend runs like a custom builtin: in a fresh process per call (not the
  caller's: do not rely on its process dictionary or `self()`), bounded by the
  session's `:builtin_timeout_ms`; a raise, throw, exit or timeout fails only
  that operation. It must not call `ExBashkit.Session.exec/3` on its own
  session (that returns an error at once); other sessions are fine.

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

  @doc "Handle one filesystem operation. `arg` is the term given with `{module, arg}`, else `nil`."
  @callback handle(request(), arg :: term()) :: reply()
end
