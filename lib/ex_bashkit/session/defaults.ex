defmodule ExBashkit.Session.Defaults do
  @moduledoc false
  # The numeric defaults that more than one module needs, declared once.
  # The option defaults themselves live in the schema of
  # `ExBashkit.Session.Options` (which sends every field to the core: the
  # Rust side has no defaults of its own); these are the ones the ceilings,
  # the `Session` struct, the back-call context, the schema's docs, the
  # tool's system prompt and the shell share:
  #
  #   * `get/1`: the back-call options' defaults (before the ceilings);
  #   * `bashkit_limit/1`: what bashkit 0.20 applies to a `:limits` key left
  #     unset (`ExecutionLimits::default`). We do not send these (unset keeps
  #     bashkit's value); they are declared here so that what the docs, the
  #     ceilings and the tool's prompt say is one number, and a test runs a
  #     default session into the limit to prove bashkit still applies it.

  @defaults %{
    builtin_timeout_ms: 30_000,
    # bashkit's maximum file size: a larger read could not be stored anyway.
    max_reply_bytes: 10_000_000
  }

  @bashkit_limits %{
    timeout_ms: 30_000,
    max_commands: 10_000
  }

  # The width of the core's integers: a count past it means "unlimited".
  @u64_max 0xFFFF_FFFF_FFFF_FFFF

  @doc false
  # The largest count the core stores (its integers are u64).
  @spec u64_max() :: pos_integer()
  def u64_max, do: @u64_max

  @doc false
  @spec get(atom()) :: term()
  def get(key), do: Map.fetch!(@defaults, key)

  @doc false
  @spec bashkit_limit(atom()) :: pos_integer()
  def bashkit_limit(key), do: Map.fetch!(@bashkit_limits, key)

  @doc false
  # How the docs write a default: `"sandbox"`, `30_000`.
  @spec doc(term()) :: String.t()
  def doc(value) when is_integer(value) do
    value
    |> Integer.to_string()
    |> String.graphemes()
    |> Enum.reverse()
    |> Enum.chunk_every(3)
    |> Enum.map_join("_", &Enum.join/1)
    |> String.reverse()
  end

  def doc(value), do: inspect(value)

  @doc false
  # A non-negative count as the core stores it: past 2^64-1 is "unlimited",
  # which the core's integers saturate to anyway.
  @spec clamp_u64(non_neg_integer()) :: non_neg_integer()
  def clamp_u64(n) when is_integer(n) and n >= 0, do: min(n, @u64_max)
end
