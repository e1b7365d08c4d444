defmodule ExBashkit.Test.MapFs do
  @moduledoc false
  # A small, correct `ExBashkit.VirtualFs` backend over an Agent holding
  # `%{path => content | :dir}`, for tests that need a real backend.
  @behaviour ExBashkit.VirtualFs

  def start(files \\ %{}) do
    {:ok, agent} = Agent.start_link(fn -> Map.put(files, "/", :dir) end)
    agent
  end

  def contents(agent), do: Agent.get(agent, & &1)

  @impl true
  def handle(request, agent), do: Agent.get_and_update(agent, &apply_op(request, &1))

  defp apply_op(%{op: :read, path: p}, fs) do
    case fs do
      %{^p => :dir} -> {{:error, :eisdir}, fs}
      %{^p => data} -> {{:ok, data}, fs}
      _ -> {{:error, :enoent}, fs}
    end
  end

  defp apply_op(%{op: :write, path: p, content: c}, fs), do: {:ok, Map.put(fs, p, c)}

  defp apply_op(%{op: :append, path: p, content: c}, fs),
    do: {:ok, Map.update(fs, p, c, &(&1 <> c))}

  defp apply_op(%{op: :mkdir, path: p}, fs), do: {:ok, Map.put(fs, p, :dir)}

  defp apply_op(%{op: :remove, path: p}, fs) do
    if Map.has_key?(fs, p),
      do: {:ok, Map.reject(fs, fn {k, _} -> k == p or String.starts_with?(k, p <> "/") end)},
      else: {{:error, :enoent}, fs}
  end

  defp apply_op(%{op: :rename, path: p, to: to}, fs) do
    case Map.pop(fs, p) do
      {nil, _} -> {{:error, :enoent}, fs}
      {v, rest} -> {:ok, Map.put(rest, to, v)}
    end
  end

  defp apply_op(%{op: :stat, path: p}, fs) do
    case fs do
      %{^p => :dir} -> {{:ok, %{type: :dir, size: 0}}, fs}
      %{^p => data} -> {{:ok, %{type: :file, size: byte_size(data)}}, fs}
      _ -> {{:error, :enoent}, fs}
    end
  end

  defp apply_op(%{op: :list, path: p}, fs) do
    prefix = if p == "/", do: "/", else: p <> "/"

    entries =
      for {k, v} <- fs,
          k != "/",
          String.starts_with?(k, prefix),
          rest = String.replace_prefix(k, prefix, ""),
          not String.contains?(rest, "/") do
        {rest, if(v == :dir, do: :dir, else: :file)}
      end

    {{:ok, entries}, fs}
  end
end
