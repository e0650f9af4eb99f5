"""Code artifacts for the classifier evaluation set: snippets, tracebacks, diffs, configs.

``asks`` are things a developer says about the artifact (fix it, explain it, extend it).
"""

from __future__ import annotations

from typing import TypedDict


class Snippet(TypedDict):
    lang: str
    code: str
    asks: list[str]


SNIPPETS: list[Snippet] = [
    {
        "lang": "python",
        "code": (
            "def average(values):\n"
            "    total = 0\n"
            "    for v in values:\n"
            "        total += v\n"
            "    return total / len(values)\n"
            "\n"
            "print(average([]))\n"
        ),
        "asks": [
            "This crashes with ZeroDivisionError on an empty list. How should I handle that?",
            "Can you make this more pythonic?",
        ],
    },
    {
        "lang": "python",
        "code": (
            "import requests\n"
            "\n"
            "def fetch_all(urls):\n"
            "    results = []\n"
            "    for url in urls:\n"
            "        r = requests.get(url, timeout=10)\n"
            "        results.append(r.json())\n"
            "    return results\n"
        ),
        "asks": [
            "Rewrite this with asyncio and httpx so the requests run concurrently.",
            "Add retries with exponential backoff to this.",
        ],
    },
    {
        "lang": "javascript",
        "code": (
            "function debounce(fn, wait) {\n"
            "  let timer;\n"
            "  return function (...args) {\n"
            "    clearTimeout(timer);\n"
            "    timer = setTimeout(() => fn(...args), wait);\n"
            "  };\n"
            "}\n"
            "\n"
            "input.addEventListener('keyup', debounce(search, 300));\n"
        ),
        "asks": [
            "Why is `this` undefined inside search when it's called through debounce?",
            "Explain how this debounce works line by line.",
        ],
    },
    {
        "lang": "typescript",
        "code": (
            "interface User {\n"
            "  id: number;\n"
            "  name: string;\n"
            "  email?: string;\n"
            "}\n"
            "\n"
            "export async function loadUsers(): Promise<User[]> {\n"
            "  const res = await fetch('/api/users');\n"
            "  const data = res.json();\n"
            "  return data.map((u: any) => ({ id: u.id, name: u.full_name }));\n"
            "}\n"
        ),
        "asks": [
            "TypeScript says `Property 'map' does not exist on type 'Promise<any>'`. What's wrong?",
            "Add proper error handling for non-200 responses.",
        ],
    },
    {
        "lang": "java",
        "code": (
            "public class Counter {\n"
            "    private int count = 0;\n"
            "\n"
            "    public void increment() {\n"
            "        count++;\n"
            "    }\n"
            "\n"
            "    public int get() {\n"
            "        return count;\n"
            "    }\n"
            "}\n"
        ),
        "asks": [
            "Is this class thread-safe? If not, fix it without using synchronized everywhere.",
            "Write JUnit 5 tests for this class.",
        ],
    },
    {
        "lang": "go",
        "code": (
            "func worker(jobs <-chan int, results chan<- int, wg *sync.WaitGroup) {\n"
            "\tdefer wg.Done()\n"
            "\tfor j := range jobs {\n"
            "\t\tresults <- j * 2\n"
            "\t}\n"
            "}\n"
            "\n"
            "func main() {\n"
            "\tjobs := make(chan int, 100)\n"
            "\tresults := make(chan int, 100)\n"
            "\tvar wg sync.WaitGroup\n"
            "\tfor w := 0; w < 3; w++ {\n"
            "\t\twg.Add(1)\n"
            "\t\tgo worker(jobs, results, &wg)\n"
            "\t}\n"
            "\tfor i := 0; i < 9; i++ {\n"
            "\t\tjobs <- i\n"
            "\t}\n"
            "\twg.Wait()\n"
            "}\n"
        ),
        "asks": [
            "This program hangs forever. Why?",
            "How do I collect the results after all workers finish?",
        ],
    },
    {
        "lang": "rust",
        "code": (
            "fn longest(a: &str, b: &str) -> &str {\n"
            "    if a.len() > b.len() { a } else { b }\n"
            "}\n"
            "\n"
            "fn main() {\n"
            '    let s1 = String::from("hello");\n'
            "    let r;\n"
            "    {\n"
            '        let s2 = String::from("hi");\n'
            "        r = longest(&s1, &s2);\n"
            "    }\n"
            '    println!("{}", r);\n'
            "}\n"
        ),
        "asks": [
            "The compiler says `missing lifetime specifier`. How do I fix it?",
            "Explain the borrow checker error I'll get after adding lifetimes here.",
        ],
    },
    {
        "lang": "c",
        "code": (
            "#include <stdio.h>\n"
            "#include <string.h>\n"
            "\n"
            "int main(void) {\n"
            "    char name[8];\n"
            '    printf("Name: ");\n'
            "    gets(name);\n"
            '    printf("Hello, %s!\\n", name);\n'
            "    return 0;\n"
            "}\n"
        ),
        "asks": [
            "What's unsafe about this program and how do I fix it?",
            "Why does my compiler warn about gets?",
        ],
    },
    {
        "lang": "cpp",
        "code": (
            "std::vector<int> v = {1, 2, 3, 4, 5};\n"
            "for (auto it = v.begin(); it != v.end(); ++it) {\n"
            "    if (*it % 2 == 0) {\n"
            "        v.erase(it);\n"
            "    }\n"
            "}\n"
        ),
        "asks": [
            "This sometimes segfaults. What am I doing wrong?",
            "Rewrite this using the erase-remove idiom.",
        ],
    },
    {
        "lang": "sql",
        "code": (
            "SELECT c.name, SUM(o.total) AS revenue\n"
            "FROM customers c\n"
            "JOIN orders o ON o.customer_id = c.id\n"
            "WHERE o.created_at >= '2024-01-01'\n"
            "GROUP BY c.name\n"
            "ORDER BY revenue DESC\n"
            "LIMIT 10;\n"
        ),
        "asks": [
            "Two customers with the same name get merged. How do I fix the grouping?",
            "How can I make this query faster on a 50M row orders table?",
        ],
    },
    {
        "lang": "bash",
        "code": (
            "#!/bin/bash\n"
            "for f in $(ls *.log); do\n"
            "  if [ $(wc -l < $f) -gt 1000 ]; then\n"
            "    gzip $f\n"
            "  fi\n"
            "done\n"
        ),
        "asks": [
            "This breaks on filenames with spaces. Can you fix it?",
            "Make this script safe with set -euo pipefail and proper quoting.",
        ],
    },
    {
        "lang": "yaml",
        "code": (
            "apiVersion: apps/v1\n"
            "kind: Deployment\n"
            "metadata:\n"
            "  name: api\n"
            "spec:\n"
            "  replicas: 2\n"
            "  selector:\n"
            "    matchLabels:\n"
            "      app: api\n"
            "  template:\n"
            "    metadata:\n"
            "      labels:\n"
            "        app: web\n"
            "    spec:\n"
            "      containers:\n"
            "        - name: api\n"
            "          image: registry.example.com/api:1.4.2\n"
            "          ports:\n"
            "            - containerPort: 8080\n"
        ),
        "asks": [
            "kubectl apply fails with `selector does not match template labels`. What's wrong?",
            "Add readiness and liveness probes on /healthz to this deployment.",
        ],
    },
    {
        "lang": "dockerfile",
        "code": (
            "FROM python:3.12\n"
            "COPY . /app\n"
            "WORKDIR /app\n"
            "RUN pip install -r requirements.txt\n"
            "CMD python main.py\n"
        ),
        "asks": [
            "Every code change reinstalls all dependencies. How do I fix the layer caching?",
            "Turn this into a multi-stage build with a slim runtime image.",
        ],
    },
    {
        "lang": "html",
        "code": (
            '<div class="card">\n'
            '  <img src="avatar.png">\n'
            '  <div class="card-body">\n'
            "    <h3>Jane Doe</h3>\n"
            "    <p>Product designer</p>\n"
            "  </div>\n"
            "</div>\n"
            "<style>\n"
            "  .card { display: flex; width: 300px; }\n"
            "  .card img { width: 64px; }\n"
            "</style>\n"
        ),
        "asks": [
            "How do I vertically center the text next to the image?",
            "Make this card accessible; what's missing?",
        ],
    },
    {
        "lang": "ruby",
        "code": (
            "class OrdersController < ApplicationController\n"
            "  def index\n"
            "    @orders = Order.all\n"
            "    @orders.each do |o|\n"
            "      o.customer_name = o.customer.name\n"
            "    end\n"
            "  end\n"
            "end\n"
        ),
        "asks": [
            "This page is really slow with many orders. I think it's an N+1 problem, how do I fix?",
            "Add pagination to this action.",
        ],
    },
    {
        "lang": "php",
        "code": (
            "<?php\n"
            "$id = $_GET['id'];\n"
            '$result = mysqli_query($conn, "SELECT * FROM users WHERE id = $id");\n'
            "$user = mysqli_fetch_assoc($result);\n"
            'echo "<h1>" . $user[\'name\'] . "</h1>";\n'
        ),
        "asks": [
            "Is this code vulnerable to anything? Please fix it.",
            "Convert this to use PDO with prepared statements.",
        ],
    },
    {
        "lang": "kotlin",
        "code": (
            "class MainViewModel(private val repo: Repo) : ViewModel() {\n"
            "    val items = MutableLiveData<List<Item>>()\n"
            "\n"
            "    fun load() {\n"
            "        GlobalScope.launch {\n"
            "            items.value = repo.fetch()\n"
            "        }\n"
            "    }\n"
            "}\n"
        ),
        "asks": [
            "The app crashes with 'Cannot invoke setValue on a background thread'. Fix please.",
            "Migrate this to StateFlow and viewModelScope.",
        ],
    },
    {
        "lang": "csharp",
        "code": (
            "public async Task<IActionResult> Upload(IFormFile file)\n"
            "{\n"
            '    var path = Path.Combine("uploads", file.FileName);\n'
            "    using (var stream = new FileStream(path, FileMode.Create))\n"
            "    {\n"
            "        file.CopyTo(stream);\n"
            "    }\n"
            "    return Ok();\n"
            "}\n"
        ),
        "asks": [
            "Review this upload endpoint for security problems.",
            "Should CopyTo be CopyToAsync here? Rewrite it properly.",
        ],
    },
    {
        "lang": "traceback",
        "code": (
            "Traceback (most recent call last):\n"
            '  File "/srv/app/main.py", line 42, in <module>\n'
            "    run()\n"
            '  File "/srv/app/main.py", line 37, in run\n'
            '    cfg = load_config(os.environ["APP_CONFIG"])\n'
            '  File "/usr/lib/python3.11/os.py", line 679, in __getitem__\n'
            "    raise KeyError(key) from None\n"
            "KeyError: 'APP_CONFIG'\n"
        ),
        "asks": [
            "I get this when I start the service under systemd, but it works in my shell. Why?",
            "What does this traceback mean?",
        ],
    },
    {
        "lang": "traceback",
        "code": (
            'Exception in thread "main" java.lang.NullPointerException: Cannot invoke '
            '"String.length()" because "s" is null\n'
            "\tat com.acme.text.Utils.wordCount(Utils.java:18)\n"
            "\tat com.acme.text.Report.build(Report.java:57)\n"
            "\tat com.acme.Main.main(Main.java:12)\n"
        ),
        "asks": [
            "How do I track down where the null comes from?",
            "Got this stack trace in prod, what's the likely cause?",
        ],
    },
    {
        "lang": "diff",
        "code": (
            "diff --git a/billing/invoice.py b/billing/invoice.py\n"
            "index 3f2a1c9..8b7d0e4 100644\n"
            "--- a/billing/invoice.py\n"
            "+++ b/billing/invoice.py\n"
            "@@ -21,9 +21,12 @@ class Invoice:\n"
            "     def total(self) -> Decimal:\n"
            "-        subtotal = sum(line.amount for line in self.lines)\n"
            "-        return subtotal * (1 + self.tax_rate)\n"
            "+        subtotal = sum((line.amount for line in self.lines), Decimal(0))\n"
            '+        tax = (subtotal * self.tax_rate).quantize(Decimal("0.01"))\n'
            "+        return subtotal + tax\n"
        ),
        "asks": [
            "Review this diff. Anything I missed?",
            "Does this change alter rounding behaviour for existing invoices?",
        ],
    },
    {
        "lang": "python",
        "code": (
            "class LRUCache:\n"
            "    def __init__(self, capacity: int):\n"
            "        self.capacity = capacity\n"
            "        self.data = {}\n"
            "        self.order = []\n"
            "\n"
            "    def get(self, key):\n"
            "        if key not in self.data:\n"
            "            return -1\n"
            "        self.order.remove(key)\n"
            "        self.order.append(key)\n"
            "        return self.data[key]\n"
            "\n"
            "    def put(self, key, value):\n"
            "        if key in self.data:\n"
            "            self.order.remove(key)\n"
            "        elif len(self.data) >= self.capacity:\n"
            "            oldest = self.order.pop(0)\n"
            "            del self.data[oldest]\n"
            "        self.data[key] = value\n"
            "        self.order.append(key)\n"
        ),
        "asks": [
            "get and put are O(n). Make them O(1).",
            "Write pytest tests covering eviction.",
        ],
    },
    {
        "lang": "python",
        "code": (
            "df = pd.read_csv('sales.csv')\n"
            "df['month'] = df['date'].str[:7]\n"
            "summary = df.groupby('month')['amount'].sum()\n"
            "summary.plot(kind='bar')\n"
            "plt.show()\n"
        ),
        "asks": [
            "The months come out in the wrong order on the chart. How do I sort them?",
            "Parse the date column properly instead of slicing strings.",
        ],
    },
    {
        "lang": "jsx",
        "code": (
            "function TodoList() {\n"
            "  const [todos, setTodos] = useState([]);\n"
            "  useEffect(() => {\n"
            "    fetch('/api/todos').then(r => r.json()).then(setTodos);\n"
            "  });\n"
            "  return (\n"
            "    <ul>\n"
            "      {todos.map(t => <li>{t.title}</li>)}\n"
            "    </ul>\n"
            "  );\n"
            "}\n"
        ),
        "asks": [
            "My component keeps refetching in an infinite loop. Why?",
            "React warns about keys. Fix the warnings and the fetch loop.",
        ],
    },
    {
        "lang": "json",
        "code": (
            "{\n"
            '  "compilerOptions": {\n'
            '    "target": "es2017",\n'
            '    "module": "commonjs",\n'
            '    "strict": true,\n'
            '    "paths": { "@/*": ["src/*"] }\n'
            "  }\n"
            "}\n"
        ),
        "asks": [
            "Imports like @/utils fail at runtime even though tsc is happy. What's missing?",
            "Why does the paths mapping need baseUrl here?",
        ],
    },
    {
        "lang": "terraform",
        "code": (
            'resource "aws_s3_bucket" "logs" {\n'
            '  bucket = "acme-prod-logs"\n'
            '  acl    = "public-read"\n'
            "}\n"
            "\n"
            'resource "aws_s3_bucket_versioning" "logs" {\n'
            "  bucket = aws_s3_bucket.logs.id\n"
            "  versioning_configuration {\n"
            '    status = "Enabled"\n'
            "  }\n"
            "}\n"
        ),
        "asks": [
            "Anything risky in this terraform? Suggest fixes.",
            "The acl argument is deprecated; rewrite with the new resources.",
        ],
    },
]
