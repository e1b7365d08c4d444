defmodule ExBashkit.Session.VfsPath do
  @moduledoc false
  # Paths inside the sandbox, lexically: the one normaliser of `:cwd`, the
  # search options, the sandbox's paths, and the one rule for mount points
  # (`:mounts`, `:virtual_fs`, `mount/4`), which must already be written in
  # normal form.

  @doc false
  # `path` with `.`, empty and trailing segments removed and `..` resolved
  # (never above `/`); the result is absolute.
  @spec normalize(String.t()) :: String.t()
  def normalize(path) do
    path
    |> String.split("/", trim: true)
    |> Enum.reduce([], fn
      ".", acc -> acc
      "..", acc -> Enum.drop(acc, 1)
      segment, acc -> [segment | acc]
    end)
    |> Enum.reverse()
    |> then(&("/" <> Enum.join(&1, "/")))
  end

  @doc false
  # `path` resolved against the absolute directory `base`.
  @spec join(String.t(), String.t()) :: String.t()
  def join(base, "/" <> _ = path) when is_binary(base), do: normalize(path)
  def join(base, path), do: normalize(base <> "/" <> path)

  @doc false
  # Whether the absolute `path` is already in normal form: no `.`, `..`,
  # empty segment or trailing `/` (`/` itself is).
  @spec normal?(String.t()) :: boolean()
  def normal?("/"), do: true

  def normal?("/" <> rest),
    do: rest |> String.split("/") |> Enum.all?(&(&1 not in ["", ".", ".."]))

  def normal?(_), do: false
end
