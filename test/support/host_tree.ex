defmodule ExBashkit.Test.HostTree do
  @moduledoc false
  # Throw-away host directory trees (real files and real symlinks) for the
  # mount escape tests, under `System.tmp_dir!/0`, removed when the test ends.
  #
  # Layout of `escape_layout!/0` (all under a fresh `root`):
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

  def secret, do: @secret

  def escape_layout! do
    root = Path.join(System.tmp_dir!(), "ex_bashkit_esc_#{System.unique_integer([:positive])}")
    File.mkdir_p!(Path.join(root, "inner/sub"))
    # Canonical (macOS /tmp is a symlink).
    root = resolve(root)
    ExUnit.Callbacks.on_exit(fn -> File.rm_rf!(root) end)
    inner = Path.join(root, "inner")

    File.write!(Path.join(root, "secret.txt"), @secret)
    File.write!(Path.join(inner, "ok.txt"), "inside\n")
    File.write!(Path.join(inner, "sub/deep.txt"), "deep\n")
    File.ln_s!("../secret.txt", Path.join(inner, "rel_link"))
    File.ln_s!(Path.join(root, "secret.txt"), Path.join(inner, "abs_link"))
    File.ln_s!("/etc/hostname", Path.join(inner, "host_link"))
    File.ln_s!("..", Path.join(inner, "dir_link"))
    File.ln_s!(root, Path.join(inner, "abs_dir"))
    File.ln_s!("loop", Path.join(inner, "loop"))
    File.ln_s!("ok.txt", Path.join(inner, "in_link"))

    %{root: root, inner: inner, secret_path: Path.join(root, "secret.txt")}
  end

  @doc """
  Every entry under `dir` (relative path => {:file, bytes} | :dir |
  {:symlink, target}), walked without following symlinks (the layout has
  links to `..`).
  """
  def snapshot(dir), do: walk(dir, dir, %{})

  defp walk(root, dir, acc) do
    dir
    |> File.ls!()
    |> Enum.reduce(acc, fn name, acc ->
      path = Path.join(dir, name)
      rel = Path.relative_to(path, root)

      case File.lstat!(path).type do
        :symlink -> Map.put(acc, rel, {:symlink, File.read_link!(path)})
        :directory -> walk(root, path, Map.put(acc, rel, :dir))
        _ -> Map.put(acc, rel, {:file, File.read!(path)})
      end
    end)
  end

  @doc "Assert no symlink under `dir` resolves outside it and `secret_path` is untouched."
  def assert_contained!(layout) do
    import ExUnit.Assertions
    assert File.read!(layout.secret_path) == @secret
    assert File.stat!(layout.secret_path).links == 1, "a hard link to the secret appeared"
    # Nothing new next to the mounted dir.
    assert layout.root |> File.ls!() |> Enum.sort() == ["inner", "secret.txt"]
    :ok
  end

  defp resolve(path) do
    case :file.read_link_all(path) do
      {:ok, target} -> Path.expand(to_string(target), Path.dirname(path))
      {:error, _} -> path
    end
    |> then(fn p ->
      parent = Path.dirname(p)
      if parent == p, do: p, else: Path.join(resolve(parent), Path.basename(p))
    end)
  end
end
