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
  - cargo's output goes to stderr, so that a task's stdout (`mix ex_bashkit.shell`
    piped) carries only what the task prints.
  """

  use Mix.Task.Compiler

  @crate "native/ex_bashkit"
  @lib_name "ex_bashkit"

  @impl true
  def run(_args) do
    profile = System.get_env("EX_BASHKIT_CARGO_PROFILE", "release")
    manifest = Path.join(@crate, "Cargo.toml")
    cargo = System.find_executable("cargo") || Mix.raise("cargo not found on PATH: install Rust")

    args =
      ["build", "--manifest-path", manifest] ++
        if(profile == "release", do: ["--release"], else: [])

    case System.cmd(cargo, args, into: IO.stream(:standard_error, :line), stderr_to_stdout: true) do
      {_, 0} -> :ok
      {_, code} -> Mix.raise("cargo build failed (exit #{code})")
    end

    install(Path.join([target_dir(), profile, built_file_name()]))
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

  # `:erlang.load_nif/2` appends `.so` on every unix, macOS included.
  defp install(built) do
    dest_dir = Path.join(["priv", "native"])
    dest = Path.join(dest_dir, "#{@lib_name}.so")
    File.mkdir_p!(dest_dir)

    unless same_file?(built, dest) do
      tmp = dest <> ".tmp#{System.unique_integer([:positive])}"
      File.cp!(built, tmp)
      File.rename!(tmp, dest)
    end

    Mix.Project.build_structure()
  end

  defp same_file?(a, b) do
    with {:ok, sa} <- File.stat(a), {:ok, sb} <- File.stat(b) do
      sa.size == sb.size and sa.mtime <= sb.mtime
    else
      _ -> false
    end
  end
end
