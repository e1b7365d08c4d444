defmodule ExBashkit.Result do
  @moduledoc """
  The outcome of a script that ran to completion.

  A non-zero `exit_code` is still a result (`{:ok, %ExBashkit.Result{}}`), as in
  a real shell; only scripts that could not run (parse error, limit exceeded,
  cancellation) produce `{:error, message}`.

  Fields:

    * `:stdout`, `:stderr` - everything the script wrote, as binaries (any
      bytes, not necessarily UTF-8).
    * `:exit_code` - the exit status of the last command.
    * `:stdout_truncated`, `:stderr_truncated` - `true` when the stream hit its
      byte cap (`:max_stdout_bytes` / `:max_stderr_bytes` limits, 1 MiB each
      by default) and the rest was dropped.

  A custom builtin may also return a `%ExBashkit.Result{}` to control its own
  stdout, stderr and exit code.
  """

  defstruct stdout: "",
            stderr: "",
            exit_code: 0,
            stdout_truncated: false,
            stderr_truncated: false

  @type t :: %__MODULE__{
          stdout: binary(),
          stderr: binary(),
          exit_code: integer(),
          stdout_truncated: boolean(),
          stderr_truncated: boolean()
        }

  @doc false
  # Shape the native tuple into a struct.
  @spec from_native({binary(), binary(), integer(), boolean(), boolean()}) :: t()
  def from_native({stdout, stderr, exit_code, stdout_truncated, stderr_truncated}) do
    %__MODULE__{
      stdout: stdout,
      stderr: stderr,
      exit_code: exit_code,
      stdout_truncated: stdout_truncated,
      stderr_truncated: stderr_truncated
    }
  end
end
