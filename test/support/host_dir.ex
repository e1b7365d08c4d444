defmodule ExBashkit.Test.HostDir do
  @moduledoc false
  # Real, throw-away host directories for the mount tests, under
  # `System.tmp_dir!/0` (on Linux `/tmp`, which bashkit's sensitive-path
  # denylist does not cover; on macOS it lives under `/private`, which it
  # does). Removed when the test ends.
  #
  # `escape_layout!/0` is the fixed tree of the mount escape tests (all
  # under a fresh `root`):
  #
  #   root/secret.txt                  outside the mount: must never leak
  #   root/inner/ok.txt                the mounted directory
  #   root/inner/sub/deep.txt
  #   root/inner/rel_link  -> ../secret.txt        relative, out of the mount
  #   root/inner/abs_link  -> <root>/secret.txt    absolute, out of the mount
  #   root/inner/host_link -> /etc/hostname        absolute, host system file
  #   root/inner/dir_link  -> ..                   directory, out of the mount
  #   root/inner/abs_dir   -> <root>               absolute directory
  #   root/inner/loop      -> loop                 self-loop
  #   root/inner/in_link   -> ok.txt               stays inside: allowed

  @secret "HOST-SECRET-#{:erlang.phash2(make_ref())}"

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

  @doc "What `escape_layout!/0` keeps outside the mount."
  def secret, do: @secret

  @doc """
  The escape layout above; returns `%{root, inner, secret_path}` (canonical).
  """
  def escape_layout! do
    root = create!(%{"secret.txt" => @secret})
    inner = Path.join(root, "inner")

    populate!(inner, %{
      "ok.txt" => "inside\n",
      "sub/deep.txt" => "deep\n",
      "rel_link" => {:symlink, "../secret.txt"},
      "abs_link" => {:symlink, Path.join(root, "secret.txt")},
      "host_link" => {:symlink, "/etc/hostname"},
      "dir_link" => {:symlink, ".."},
      "abs_dir" => {:symlink, root},
      "loop" => {:symlink, "loop"},
      "in_link" => {:symlink, "ok.txt"}
    })

    %{root: root, inner: inner, secret_path: Path.join(root, "secret.txt")}
  end

  @doc "Assert the escape layout's secret is untouched and nothing appeared beside `inner`."
  def assert_contained!(layout) do
    import ExUnit.Assertions
    assert File.read!(layout.secret_path) == @secret
    assert File.stat!(layout.secret_path).links == 1, "a hard link to the secret appeared"
    assert layout.root |> File.ls!() |> Enum.sort() == ["inner", "secret.txt"]
    :ok
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
