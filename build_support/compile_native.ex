defmodule Mix.Tasks.Compile.ExBashkitNative do
  @moduledoc """
  Builds the native library with cargo and installs it into `priv/native/`.

  This is the project's own replacement for the `rustler` Mix compiler (Hex is
  not available where the project is built). It lives outside `lib/` because a
  compiler listed in `compilers:` must exist before `lib/` is compiled.

  - `cargo build --release` runs on every compile; a no-op build takes ~0.1 s.
  - The library is installed by copy-to-temp + rename, never overwritten in
    place: a VM that has the old file loaded could crash if its mapped pages
    changed underneath it.
  - Set `EX_BASHKIT_CARGO_PROFILE=debug` for a faster-to-build debug library.
  """

  use Mix.Task.Compiler

  @crate "native/ex_bashkit"
  @lib_name "ex_bashkit"
  # The worker executable of `isolation: :process`, a bin target of the crate.
  @worker_name "ex_bashkit_worker"

  @impl true
  def run(_args) do
    profile = System.get_env("EX_BASHKIT_CARGO_PROFILE", "release")
    manifest = Path.join(@crate, "Cargo.toml")
    cargo = System.find_executable("cargo") || Mix.raise("cargo not found on PATH: install Rust")

    args =
      ["build", "--manifest-path", manifest] ++
        if(profile == "release", do: ["--release"], else: [])

    case System.cmd(cargo, args, into: IO.stream(:stdio, :line), stderr_to_stdout: true) do
      {_, 0} -> :ok
      {_, code} -> Mix.raise("cargo build failed (exit #{code})")
    end

    built = Path.join(target_dir(), profile)
    install(Path.join(built, built_file_name()), "#{@lib_name}.so")
    install(Path.join(built, @worker_name <> exe_suffix()), @worker_name <> exe_suffix())
    Mix.Project.build_structure()
    {:ok, []}
  end

  defp target_dir do
    System.get_env("CARGO_TARGET_DIR") || Path.join(@crate, "target")
  end

  defp built_file_name do
    case :os.type() do
      {:unix, :darwin} -> "lib#{@lib_name}.dylib"
      {:win32, _} -> "#{@lib_name}.dll"
      _ -> "lib#{@lib_name}.so"
    end
  end

  defp exe_suffix, do: if(match?({:win32, _}, :os.type()), do: ".exe", else: "")

  # `:erlang.load_nif/2` appends `.so` on every unix, macOS included.
  defp install(built, name) do
    dest_dir = Path.join(["priv", "native"])
    dest = Path.join(dest_dir, name)
    File.mkdir_p!(dest_dir)

    unless same_file?(built, dest) do
      tmp = dest <> ".tmp#{System.unique_integer([:positive])}"
      File.cp!(built, tmp)
      File.chmod!(tmp, File.stat!(built).mode)
      File.rename!(tmp, dest)
    end
  end

  defp same_file?(a, b) do
    with {:ok, sa} <- File.stat(a), {:ok, sb} <- File.stat(b) do
      sa.size == sb.size and sa.mtime <= sb.mtime
    else
      _ -> false
    end
  end
end
