defmodule ExBashkit.Test.HostDir do
  @moduledoc false
  # Real, throw-away host directories for the mount tests, under
  # `System.tmp_dir!/0` (on Linux `/tmp`, which bashkit's sensitive-path
  # denylist does not cover; on macOS it lives under `/private`, which it
  # does). Removed when the test ends.

  @doc """
  Create a fresh directory and lay out `tree` in it: `%{"a/b.txt" => "content"}`
  for files, `{:dir}` for empty directories and `{:symlink, target}` for
  symlinks (created verbatim, relative or absolute). Returns the canonical path.
  """
  def create!(tree \\ %{}) do
    root = Path.join(System.tmp_dir!(), "ex_bashkit_#{System.unique_integer([:positive])}")

    File.mkdir_p!(root)
    {:ok, root} = canonical(root)
    ExUnit.Callbacks.on_exit(fn -> File.rm_rf!(root) end)
    populate!(root, tree)
    root
  end

  @doc "Add entries (same shapes as `create!/1`) under `root`."
  def populate!(root, tree) do
    for {rel, entry} <- Enum.sort(tree) do
      path = Path.join(root, rel)
      File.mkdir_p!(Path.dirname(path))

      case entry do
        {:dir} -> File.mkdir_p!(path)
        {:symlink, target} -> File.ln_s!(target, path)
        content when is_binary(content) -> File.write!(path, content)
      end
    end

    root
  end

  # `System.tmp_dir!/0` may itself be reached through a symlink.
  defp canonical(path) do
    path
    |> Path.split()
    |> Enum.reduce({:ok, "/"}, fn
      "/", acc ->
        acc

      part, {:ok, dir} ->
        next = Path.join(dir, part)

        case File.read_link(next) do
          {:ok, target} -> canonical(Path.expand(target, dir))
          {:error, _} -> {:ok, next}
        end
    end)
  end

  @doc """
  Every entry under `root` (not following symlinks): `rel => content`,
  `{:dir}` or `{:symlink, target}`. Compare two of them to prove a directory
  did not change.
  """
  def snapshot(root), do: walk(root, "", %{})

  defp walk(root, rel, acc) do
    root
    |> Path.join(rel)
    |> File.ls!()
    |> Enum.reduce(acc, fn name, acc ->
      rel = if rel == "", do: name, else: Path.join(rel, name)
      path = Path.join(root, rel)

      case File.lstat!(path).type do
        :symlink -> Map.put(acc, rel, {:symlink, File.read_link!(path)})
        :directory -> walk(root, rel, Map.put(acc, rel, {:dir}))
        _ -> Map.put(acc, rel, File.read!(path))
      end
    end)
  end
end
