defmodule ExBashkit.ReadmeTest do
  # README.md promises that its quick-start blocks run as pasted: run them.
  use ExUnit.Case, async: true

  import ExUnit.CaptureIO

  @readme Path.expand("../README.md", __DIR__)
  @external_resource @readme
  # README's first command (`scripts/example`) runs this session tour.
  @tour Path.expand("../examples/session_tour.exs", __DIR__)
  @external_resource @tour

  test "the quick start and capability examples run as pasted" do
    blocks = ExBashkit.ReadmeBlocks.between(@readme, "## Quick start", "## Running scripts")
    assert length(blocks) >= 3
    ExBashkit.ReadmeBlocks.run(blocks, @readme)
  end

  test "the agent policy example runs as pasted" do
    blocks =
      ExBashkit.ReadmeBlocks.between(
        @readme,
        "## Agent policy: command allowlists, the 404 principle, soft delete",
        "## Secrets stay outside"
      )

    assert [_] = blocks
    binding = ExBashkit.ReadmeBlocks.run(blocks, @readme)
    assert {:ok, %{stdout: "127\n"}} = ExBashkit.Session.exec(binding[:session], "sort; echo $?")
  end

  test "the errors and exec_async examples run as pasted" do
    blocks =
      ExBashkit.ReadmeBlocks.between(@readme, "## Errors and async exec", "## Interactive shell")

    assert length(blocks) == 2
    ExBashkit.ReadmeBlocks.run(blocks, @readme)
  end

  test "the example session that scripts/example runs goes to its end" do
    out = capture_io(fn -> Code.eval_file(@tour) end)
    assert out =~ "the answer is 42"
    assert out =~ "[error parse] parse error"
    assert out =~ "[error limit] resource limit exceeded"
    assert out =~ "still here, in /work/data"
    assert out =~ "chunk: {:exit, 0}"
    assert out =~ ~s(created: ["/work/data/new.txt"])
  end
end

defmodule ExBashkit.ReadmeSyncTest do
  # The tar block writes rootfs.tar.gz in the current directory, as it would
  # in iex: run it in a directory of its own (the cwd is the VM's, hence
  # not async).
  use ExUnit.Case, async: false

  @readme Path.expand("../README.md", __DIR__)

  @tag :tmp_dir
  test "the tar and image example runs as pasted", %{tmp_dir: dir} do
    blocks =
      ExBashkit.ReadmeBlocks.between(
        @readme,
        "## Tar images and shared base images",
        "## History: commit, checkout, log, diff, fork"
      )

    assert length(blocks) == 1
    File.cd!(dir, fn -> ExBashkit.ReadmeBlocks.run(blocks, @readme) end)
  end

  test "the history example runs as pasted" do
    blocks =
      ExBashkit.ReadmeBlocks.between(
        @readme,
        "## History: commit, checkout, log, diff, fork",
        "## Isolation"
      )

    assert length(blocks) == 1
    ExBashkit.ReadmeBlocks.run(blocks, @readme)
  end
end
