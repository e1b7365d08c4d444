defmodule ExBashkit.Tool.Files do
  @moduledoc """
  The file tools an LLM calls beside `bash`, over an `ExBashkit.Session`:
  `read_file`, `write_file`, `edit_file`, `glob` and `grep`. Their
  definitions are part of `ExBashkit.Tool.definitions/0`, and
  `ExBashkit.Tool.call/3` runs them; the MCP server
  (`ExBashkit.MCP`) serves the same definitions.

  Each call returns a JSON-ready map with string keys whose `"error"` is
  `nil` on success and a message otherwise (then the other keys may be
  absent). A relative path resolves against the shell's current directory.

    * `read_file {path}` - `%{"path", "content", "error"}`; `content` is cut
      like `bash` output (2 000 lines, 50 KB, a marker line at the cut) and
      non-UTF-8 bytes become U+FFFD.
    * `write_file {path, content}` - creates parent directories;
      `%{"path", "bytes", "error"}`.
    * `edit_file {path, old_text, new_text}` - replaces `old_text` when it
      occurs exactly once in the file (an exact match, whitespace
      included); otherwise the file is left as it is and `error` says how
      many times it occurs. `%{"path", "replacements", "error"}`.
    * `glob {pattern}` - matching paths, sorted (`ExBashkit.Search.glob/3`
      syntax), at most 1 000: `%{"paths", "truncated", "error"}`.
    * `grep {pattern, path?, glob?}` - lines matching a regex
      (`ExBashkit.Search.grep/3`), at most 1 000:
      `%{"matches" => [%{"path", "line_number", "line"}], "truncated", "error"}`.
  """

  alias ExBashkit.{Search, Session, Tool}
  import ExBashkit.Tool.Input, only: [string!: 2, optional_string!: 2]
  alias ExBashkit.Session.VfsPath

  @max_results 1_000

  @definitions [
    %{
      name: "read_file",
      description:
        "Read a text file from the sandbox filesystem. A relative path resolves against the " <>
          "shell's current directory. Long files are cut to 2000 lines / 50 KB with a marker " <>
          "line; read further with bash (sed -n, tail).",
      input_schema: %{
        "type" => "object",
        "properties" => %{
          "path" => %{"type" => "string", "description" => "The file to read"}
        },
        "required" => ["path"],
        "additionalProperties" => false
      }
    },
    %{
      name: "write_file",
      description:
        "Write a file in the sandbox filesystem, replacing it if it exists and creating " <>
          "parent directories.",
      input_schema: %{
        "type" => "object",
        "properties" => %{
          "path" => %{"type" => "string", "description" => "The file to write"},
          "content" => %{"type" => "string", "description" => "The file's new content"}
        },
        "required" => ["path", "content"],
        "additionalProperties" => false
      }
    },
    %{
      name: "edit_file",
      description:
        "Replace old_text with new_text in a file. old_text must match the file exactly " <>
          "(whitespace and newlines included) and occur exactly once; otherwise nothing " <>
          "changes and the error says how often it occurs (add surrounding lines to make it " <>
          "unique).",
      input_schema: %{
        "type" => "object",
        "properties" => %{
          "path" => %{"type" => "string", "description" => "The file to edit"},
          "old_text" => %{"type" => "string", "description" => "The exact text to replace"},
          "new_text" => %{"type" => "string", "description" => "The text to put in its place"}
        },
        "required" => ["path", "old_text", "new_text"],
        "additionalProperties" => false
      }
    },
    %{
      name: "glob",
      description:
        "Find files by glob pattern (*, ?, ** for any depth, [abc], {a,b}), sorted. A " <>
          "relative pattern resolves against the shell's current directory. At most " <>
          "#{@max_results} paths.",
      input_schema: %{
        "type" => "object",
        "properties" => %{
          "pattern" => %{"type" => "string", "description" => "The glob, e.g. \"**/*.ex\""}
        },
        "required" => ["pattern"],
        "additionalProperties" => false
      }
    },
    %{
      name: "grep",
      description:
        "Search file contents by regular expression (Rust regex syntax) under a directory " <>
          "(default: the shell's current directory). Hidden and binary files are skipped. " <>
          "At most #{@max_results} matching lines.",
      input_schema: %{
        "type" => "object",
        "properties" => %{
          "pattern" => %{"type" => "string", "description" => "The regular expression"},
          "path" => %{"type" => "string", "description" => "Directory or file to search"},
          "glob" => %{
            "type" => "string",
            "description" => "Only files matching this glob, e.g. \"*.py\""
          }
        },
        "required" => ["pattern"],
        "additionalProperties" => false
      }
    }
  ]

  @names Enum.map(@definitions, & &1.name)

  @doc """
  The file tools' definitions: `%{name:, description:, input_schema:}`, in
  the shape of `ExBashkit.Tool.definition/0`.

  ## Examples

      iex> Enum.map(ExBashkit.Tool.Files.definitions(), & &1.name)
      ["read_file", "write_file", "edit_file", "glob", "grep"]
  """
  @spec definitions() :: [%{name: String.t(), description: String.t(), input_schema: map()}]
  def definitions, do: @definitions

  @doc """
  Run file tool `name` on `session` with `input` (the decoded JSON of the
  model's call; atom keys are accepted too). Returns the tool's map (see the
  module doc); an unknown `name` or an invalid input is an `"error"`.

  ## Examples

      iex> session = ExBashkit.Session.new()
      iex> ExBashkit.Tool.Files.call(session, "write_file", %{"path" => "/w/a.txt", "content" => "a b\\n"})
      %{"path" => "/w/a.txt", "bytes" => 4, "error" => nil}
      iex> ExBashkit.Tool.Files.call(session, "edit_file", %{"path" => "/w/a.txt", "old_text" => "b", "new_text" => "B"})
      %{"path" => "/w/a.txt", "replacements" => 1, "error" => nil}
      iex> ExBashkit.Tool.Files.call(session, "read_file", %{"path" => "/w/a.txt"})
      %{"path" => "/w/a.txt", "content" => "a B\\n", "error" => nil}
  """
  @spec call(Session.t(), String.t(), map()) :: Tool.response()
  def call(session, name, input) when name in @names and is_map(input) do
    run(session, name, input)
  catch
    {:invalid, message} -> failure("invalid input: " <> message)
  end

  def call(_session, name, input) when name in @names,
    do: failure("invalid input: the arguments must be an object, got: #{inspect(input)}")

  def call(_session, name, _input), do: failure("unknown tool: #{inspect(name)}")

  defp run(session, "read_file", input) do
    with {:ok, path} <- path(session, string!(input, "path")),
         {:ok, content} <- read(session, path) do
      %{"path" => path, "content" => Tool.cut(content, false), "error" => nil}
    end
    |> answer()
  end

  defp run(session, "write_file", input) do
    content = string!(input, "content")

    with {:ok, path} <- path(session, string!(input, "path")),
         :ok <- write(session, path, content) do
      %{"path" => path, "bytes" => byte_size(content), "error" => nil}
    end
    |> answer()
  end

  defp run(session, "edit_file", input) do
    old_text = string!(input, "old_text")
    new_text = string!(input, "new_text")

    with {:ok, path} <- path(session, string!(input, "path")),
         {:ok, content} <- read(session, path),
         {:ok, edited} <- unique_replace(content, old_text, new_text, path),
         :ok <- write(session, path, edited) do
      %{"path" => path, "replacements" => 1, "error" => nil}
    end
    |> answer()
  end

  defp run(session, "glob", input) do
    pattern = string!(input, "pattern")

    with {:ok, cwd} <- cwd(session),
         {:ok, paths} <- Search.glob(session, pattern, cwd: cwd, limit: @max_results + 1) do
      %{
        "paths" => Enum.take(paths, @max_results),
        "truncated" => length(paths) > @max_results,
        "error" => nil
      }
    end
    |> answer()
  end

  defp run(session, "grep", input) do
    pattern = string!(input, "pattern")
    glob = optional_string!(input, "glob")

    with {:ok, path} <- path(session, optional_string!(input, "path") || "."),
         {:ok, found} <-
           Search.grep(session, pattern, path: path, glob: glob, limit: @max_results + 1) do
      matches =
        found
        |> Enum.take(@max_results)
        |> Enum.map(fn match ->
          %{"path" => match.path, "line_number" => match.line_number, "line" => match.line}
        end)

      %{"matches" => matches, "truncated" => length(found) > @max_results, "error" => nil}
    end
    |> answer()
  end

  defp answer(%{} = response), do: response
  defp answer({:error, {:invalid_regex, message}}), do: failure("invalid regex: " <> message)
  defp answer({:error, message}), do: failure(message)

  defp failure(message), do: %{"error" => message}

  defp read(session, path) do
    case Session.read_file(session, path) do
      {:ok, content} -> {:ok, content}
      {:error, message} -> {:error, "cannot read #{path}: #{message}"}
    end
  end

  defp write(session, path, content) do
    case Session.write_file(session, path, content) do
      :ok -> :ok
      {:error, message} -> {:error, "cannot write #{path}: #{message}"}
    end
  end

  @doc false
  # `content` with the one occurrence of `old_text` replaced by `new_text`,
  # or how many there are when that is not one (an empty `old_text` occurs
  # 0 times): the exact unique match of Condukt's Edit, shared with
  # `ExBashkit.Sandbox.edit_file/4`.
  @spec replace_once(binary(), binary(), binary()) ::
          {:ok, binary()} | {:count, non_neg_integer()}
  def replace_once(_content, "", _new_text), do: {:count, 0}

  def replace_once(content, old_text, new_text) do
    case :binary.matches(content, old_text) do
      [{at, length}] ->
        {:ok,
         binary_part(content, 0, at) <>
           new_text <> binary_part(content, at + length, byte_size(content) - at - length)}

      matches ->
        {:count, length(matches)}
    end
  end

  defp unique_replace(content, old_text, new_text, path) do
    case replace_once(content, old_text, new_text) do
      {:ok, edited} ->
        {:ok, edited}

      {:count, 0} ->
        {:error, "old_text was not found in #{path} (it must match exactly, whitespace included)"}

      {:count, n} ->
        {:error,
         "old_text occurs #{n} times in #{path}; include more surrounding text so that it " <>
           "occurs once"}
    end
  end

  # An absolute, normal path: a relative one joined to the shell's cwd.
  defp path(_session, "/" <> _ = path), do: {:ok, VfsPath.normalize(path)}

  defp path(session, path) do
    with {:ok, cwd} <- cwd(session), do: {:ok, VfsPath.join(cwd, path)}
  end

  defp cwd(session) do
    case Session.state(session) do
      {:ok, state} -> {:ok, state.cwd}
      {:error, message} -> {:error, "cannot read the shell's current directory: " <> message}
    end
  end
end
