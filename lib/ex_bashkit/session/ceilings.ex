defmodule ExBashkit.Session.Ceilings do
  @moduledoc false
  # Node-wide ceilings on what a session may ask for, and the bounds of the
  # back-call options (`:builtin_timeout_ms`, `:max_reply_bytes`).
  #
  #     config :ex_bashkit, max_timeout_ms: 60_000, max_reply_bytes: 1_000_000
  #
  # A session asking for more than a ceiling raises at `new/1`; a session
  # asking for nothing gets the default, lowered to the ceiling. A malformed
  # ceiling raises at every `new/1`: a typo in a security setting must not
  # silently mean "no ceiling".

  @typedoc "The ceilings in force (nil: none configured)."
  @type t :: %{max_timeout_ms: pos_integer() | nil, max_reply_bytes: pos_integer() | nil}

  # What `erlang:send_after/3` and `receive ... after` accept: a back-call
  # timeout past it would crash the runner instead of timing out.
  @receive_ceiling_ms 4_294_967_295

  alias ExBashkit.Session.Defaults

  @doc false
  # The configured ceilings, validated.
  @spec read!() :: t()
  def read! do
    %{
      max_timeout_ms: ceiling!(:max_timeout_ms),
      max_reply_bytes: ceiling!(:max_reply_bytes)
    }
  end

  defp ceiling!(key) do
    case Application.fetch_env(:ex_bashkit, key) do
      :error ->
        nil

      {:ok, nil} ->
        nil

      {:ok, value} when is_integer(value) and value >= 1 ->
        value

      {:ok, value} ->
        raise ArgumentError,
              "config :ex_bashkit, #{inspect(key)} must be a positive integer (or nil for no ceiling), " <>
                "got: #{inspect(value)}; refusing to create sessions until it is fixed"
    end
  end

  @doc false
  # `:builtin_timeout_ms`: a positive integer within the receive ceiling and
  # the node's `max_timeout_ms`.
  @spec builtin_timeout_ms!(term(), t()) :: pos_integer()
  def builtin_timeout_ms!(:default, ceilings),
    do: lower(Defaults.get(:builtin_timeout_ms), ceilings.max_timeout_ms)

  def builtin_timeout_ms!(ms, ceilings) when is_integer(ms) and ms >= 1 do
    if ms > @receive_ceiling_ms do
      raise ArgumentError,
            ":builtin_timeout_ms must be at most #{@receive_ceiling_ms} (the VM's receive timeout ceiling), " <>
              "got: #{ms}"
    end

    within!(:builtin_timeout_ms, ms, :max_timeout_ms, ceilings.max_timeout_ms)
  end

  def builtin_timeout_ms!(other, _ceilings),
    do:
      raise(
        ArgumentError,
        ":builtin_timeout_ms must be a positive integer, got: #{inspect(other)}"
      )

  @doc false
  # The session's `limits: [timeout_ms: ...]` (already validated as an
  # integer or nil) against `max_timeout_ms`. With a ceiling and no limit
  # given, the session gets bashkit's default lowered to the ceiling, so no
  # session runs longer than the ceiling.
  @spec session_timeout_ms!(non_neg_integer() | nil, t()) :: non_neg_integer() | nil
  def session_timeout_ms!(nil, %{max_timeout_ms: nil}), do: nil

  def session_timeout_ms!(nil, %{max_timeout_ms: max}),
    do: lower(Defaults.bashkit_limit(:timeout_ms), max)

  def session_timeout_ms!(ms, ceilings),
    do: within!("limit :timeout_ms", ms, :max_timeout_ms, ceilings.max_timeout_ms)

  @doc false
  # `:max_reply_bytes`: a positive integer within the node's ceiling. There
  # is no "unlimited": `nil` is refused.
  @spec max_reply_bytes!(term(), t()) :: pos_integer()
  def max_reply_bytes!(:default, ceilings),
    do: lower(Defaults.get(:max_reply_bytes), ceilings.max_reply_bytes)

  def max_reply_bytes!(bytes, ceilings) when is_integer(bytes) and bytes >= 1,
    do: within!(:max_reply_bytes, bytes, :max_reply_bytes, ceilings.max_reply_bytes)

  def max_reply_bytes!(other, _ceilings) do
    raise ArgumentError,
          ":max_reply_bytes must be a positive integer (replies are always bounded; " <>
            "nil does not disable the cap), got: #{inspect(other)}"
  end

  defp lower(value, nil), do: value
  defp lower(value, ceiling), do: min(value, ceiling)

  defp within!(_option, value, _key, nil), do: value
  defp within!(_option, value, _key, ceiling) when value <= ceiling, do: value

  defp within!(option, value, key, ceiling) do
    option = if is_atom(option), do: inspect(option), else: option

    raise ArgumentError,
          "#{option} is #{value}, above the node's ceiling config :ex_bashkit, #{inspect(key)} (#{ceiling})"
  end
end
