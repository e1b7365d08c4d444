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
    timeout_ms: 30_000,
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
  Read the working directory (and, the first time, user and host names) back
  from the target, for the prompt.
  """
  @spec refresh(t()) :: t()
  def refresh(%__MODULE__{} = ctx) do
    state = Target.state(ctx.target)
    vars = Map.merge(state.variables, state.env)
    %{ctx | cwd: state.cwd, user: Map.get(vars, "USER", ctx.user), host: host(vars, ctx.host)}
  end

  defp host(vars, default) do
    case Map.get(vars, "HOSTNAME") do
      nil -> default
      name -> name
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
