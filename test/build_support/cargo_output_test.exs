defmodule ExBashkit.Build.CargoOutputTest do
  # A no-op native build says nothing (issue 62): cargo's closing
  # "Finished" line is dropped unless something was compiled.
  use ExUnit.Case, async: true

  alias ExBashkit.Build.CargoOutput

  # Every line a stand-in for cargo prints, as the build would show them.
  defp shown(text) do
    script = Path.join(System.tmp_dir!(), "fake_cargo_#{System.unique_integer([:positive])}")
    File.write!(script, "#!/bin/sh\nprintf '%s' \"$1\"\nprintf 'to stderr\\n' >&2\nexit 3\n")
    File.chmod!(script, 0o755)
    {:ok, device} = StringIO.open("")
    assert CargoOutput.run(script, [text], device) == 3
    File.rm!(script)
    {:ok, {"", written}} = StringIO.close(device)
    written
  end

  test "a no-op build writes nothing of its own" do
    assert shown("    Finished `release` profile [optimized] target(s) in 0.34s\n") ==
             "to stderr\n"
  end

  test "a build that compiled keeps every line, warnings included" do
    text =
      "   Compiling ex_bashkit v0.1.0 (/x)\nwarning: unused\n" <>
        "    Finished `release` profile [optimized] target(s) in 28.22s\n"

    assert shown(text) == text <> "to stderr\n"
  end

  test "other output of a build that compiled nothing still shows" do
    assert shown("error: could not find Cargo.toml\n") ==
             "error: could not find Cargo.toml\nto stderr\n"
  end
end
