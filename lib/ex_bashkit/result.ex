defmodule ExBashkit.Result do
  @moduledoc """
  The outcome of a script that ran to completion.

  A non-zero `exit_code` is still a result (`{:ok, %ExBashkit.Result{}}`), as in
  a real shell; only scripts that could not run to completion (parse error,
  limit exceeded, timeout, cancellation) produce `{:error, %ExBashkit.Error{}}`.

  Fields:

    * `:stdout`, `:stderr` - everything the script wrote, as binaries (any
      bytes, not necessarily UTF-8).
    * `:exit_code` - the exit status of the last command.
    * `:stdout_truncated`, `:stderr_truncated` - `true` when the stream hit its
      byte cap (`:max_stdout_bytes` / `:max_stderr_bytes` limits, 1 MiB each
      by default) and the rest was dropped.
    * `:changes` - with `track_changes: true` (see `ExBashkit.Session.exec/3`),
      the files the exec created, modified and deleted:
      `%{created: [path], modified: [path], deleted: [path], complete: boolean}`
      (`complete` is `false` when a listing was cut: the filesystem was too
      large to list whole, or the exec's deadline or a cancel came while it
      was listed; the lists then hold what was seen); otherwise `nil`.

    * `:requests` - every HTTP request the exec made (`curl`, `wget`, `http`
      and whatever else goes through the session's HTTP client; each
      redirect hop its own), in order:
      `%{method: "GET", url: url, status: 200 | nil, decision: :allow | :deny,
      bytes: n}`. `decision` is `:deny` for a request `:allow_net` or the
      `:egress` callback refused (nothing went out); `status` is `nil` when
      denied or when the server could not be reached; `bytes` is the size
      of the response body the script got. Credentials never appear (see
      `ExBashkit.Session`, "Credentials"). `[]` when it made none.

  What the exec cost, for logging and accounting (`nil` when unknown, e.g.
  in a result a custom builtin returned):

    * `:wall_time_us` - microseconds the interpreter spent on the script,
      from taking the session to the end (time queued behind other execs of
      the session excluded).
    * `:commands` - commands the script ran, as bashkit counts them against
      `:max_commands` (assignments and builtins included).
    * `:stdout_bytes`, `:stderr_bytes` - bytes the script wrote to stdout and
      stderr, as kept in this result (at most the byte cap when truncated).

  A custom builtin may also return a `%ExBashkit.Result{}` to control its own
  stdout, stderr and exit code.
  """

  defstruct stdout: "",
            stderr: "",
            exit_code: 0,
            stdout_truncated: false,
            stderr_truncated: false,
            changes: nil,
            requests: [],
            wall_time_us: nil,
            commands: nil,
            stdout_bytes: nil,
            stderr_bytes: nil

  @type t :: %__MODULE__{
          stdout: binary(),
          stderr: binary(),
          exit_code: integer(),
          stdout_truncated: boolean(),
          stderr_truncated: boolean(),
          changes: changes() | nil,
          requests: [request()],
          wall_time_us: non_neg_integer() | nil,
          commands: non_neg_integer() | nil,
          stdout_bytes: non_neg_integer() | nil,
          stderr_bytes: non_neg_integer() | nil
        }

  @typedoc "An HTTP request an exec made (see `:requests`)."
  @type request :: %{
          method: String.t(),
          url: String.t(),
          status: non_neg_integer() | nil,
          decision: :allow | :deny,
          bytes: non_neg_integer()
        }

  @typedoc "Files an exec touched, by absolute path, each list sorted."
  @type changes :: %{
          created: [String.t()],
          modified: [String.t()],
          deleted: [String.t()],
          complete: boolean()
        }
end
