defmodule ExBashkit.Shell.Context do
  @moduledoc """
  The state of one `ExBashkit.Shell` run: the target it drives, the settings
  meta-commands change (`%timeout`), what the last command left (its exit
  code and file changes) and what the prompt shows.
  """

  alias ExBashkit.Shell.{Output, Target}

  @enforce_keys [:target, :terminal]
  defstruct [
    :target,
    :terminal,
    key: nil,
    timeout_ms: ExBashkit.Session.Defaults.bashkit_limit(:timeout_ms),
    last_exit: 0,
    last_changes: nil,
    user: "user",
    host: "host",
    cwd: "/",
    output: %Output{}
  ]

  @typedoc "A shell's state (see the module doc)."
  @type t :: %__MODULE__{
          target: Target.t(),
          terminal: boolean(),
          key: binary() | nil,
          timeout_ms: pos_integer(),
          last_exit: integer(),
          last_changes: ExBashkit.Result.changes() | :unknown | nil,
          user: String.t(),
          host: String.t(),
          cwd: String.t(),
          output: Output.t()
        }

  @doc """
  Ask the sandbox who and where it is (`whoami`, `hostname`) for the prompt.
  One exec, run once when a terminal shell starts.
  """
  @spec identify(t()) :: t()
  def identify(%__MODULE__{} = ctx) do
    case Target.exec(ctx.target, "whoami; hostname", timeout_ms: 5_000) do
      {:ok, %{exit_code: 0, stdout: out}} ->
        case String.split(out, "\n", trim: true) do
          [user, host] -> %{ctx | user: user, host: host}
          _ -> ctx
        end

      _ ->
        ctx
    end
  end

  @doc "Read the working directory back from the target, for the prompt."
  @spec refresh(t()) :: t()
  def refresh(%__MODULE__{} = ctx) do
    # A target that cannot answer now keeps the prompt it had.
    case Target.state(ctx.target) do
      {:ok, %{cwd: cwd}} -> %{ctx | cwd: cwd}
      {:error, _} -> ctx
    end
  end

  @doc """
  The prompt: `user@host:cwd$ ` in a terminal, nothing when piped.
  """
  @spec prompt(t()) :: String.t()
  def prompt(%__MODULE__{terminal: false}), do: ""
  def prompt(ctx), do: "#{ctx.user}@#{ctx.host}:#{ctx.cwd}$ "

  @doc "The continuation prompt: `> ` in a terminal, nothing when piped."
  @spec continuation(t()) :: String.t()
  def continuation(%__MODULE__{terminal: false}), do: ""
  def continuation(_ctx), do: "> "

  @doc "Apply `fun` to the output state."
  @spec output(t(), (Output.t() -> Output.t())) :: t()
  def output(ctx, fun), do: %{ctx | output: fun.(ctx.output)}
end
